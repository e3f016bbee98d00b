"""Smoke and logic tests of ``benchmarks/privacy_utility.py``.

One run serves the schema and report tests: ``--quick --smoke`` in the default
run (tiny generated data, one eps under both accountings, one T per family: the
fewest compiled programs), ``--quick`` under ``pytest --full``, whose quick-size
assertions (``test_quick_outputs_and_schema``) are that tier's.
"""

from __future__ import annotations

import json
import math
import types

import numpy as np
import pytest

from conftest import check_smoke_needs_quick, full_run, known_optima, load_benchmark
from dpjax import accounting


_DATASET_KEYS = {"schema", "machine", "quick", "dataset", "n", "d", "delta", "loss_star", "ridge",
                 "repeats", "seed", "init", "levels", "algorithms", "seconds_total"}
_ROW_KEYS = {"dataset", "epsilon", "accounting", "rho", "algorithm", "gd_steps", "gd_mean", "gd_se",
             "gd_seconds", "gd_at_edge", "gd_at_low_edge", "steps", "mean", "se", "seconds", "at_edge", "at_low_edge", "loss_ratio",
             "time_ratio", "verdict", "gd_match_steps", "gd_match_seconds", "gd_match_ratio",
             "ours_match_steps", "ours_match_seconds", "ours_match_ratio"}


@pytest.fixture(scope="module")
def pu():
  return load_benchmark("privacy_utility")


@pytest.fixture(scope="module")
def run_mode(pu, request) -> types.SimpleNamespace:
  """The module's run: ``--quick`` under ``pytest --full``, else ``--quick --smoke``."""
  if full_run(request):
    return types.SimpleNamespace(flags=["--quick"], dataset="synthetic",
                                 algorithms=pu.QUICK_ALGORITHMS, epsilons=pu.QUICK_EPSILONS,
                                 grids=pu.QUICK_GRIDS)
  return types.SimpleNamespace(flags=["--quick", "--smoke"], dataset=pu.SMOKE_DATASET,
                               algorithms=pu.SMOKE_ALGORITHMS, epsilons=pu.SMOKE_EPSILONS,
                               grids=pu.SMOKE_GRIDS)


@pytest.fixture(scope="module")
def quick_run(pu, run_mode, tmp_path_factory):
  out = tmp_path_factory.mktemp("pu")
  with known_optima():  # skips seconds of float64 Newton (the solver: test_solve.py)
    assert pu.main([*run_mode.flags, "--out-dir", str(out)]) == 0
  return out


def test_outputs_and_schema(pu, run_mode, quick_run):
  """The schema, tuning records, timing, tables and report of this tier's run.

  Everything but the quick run's sizes, which ``test_quick_outputs_and_schema`` pins.
  """
  name = run_mode.dataset
  for fname in ("privacy_utility.json", "privacy_utility.md", "privacy_utility.png",
                f"privacy_utility_{name}.json"):
    assert (quick_run / fname).stat().st_size > 0, fname
  per = json.loads((quick_run / f"privacy_utility_{name}.json").read_text())
  assert set(per) == _DATASET_KEYS
  assert per["quick"] is True and per["repeats"] == 3 and per["dataset"] == name
  assert per["delta"] == pytest.approx(per["n"] ** -2)
  if name == pu.SMOKE_DATASET:
    assert (per["n"], per["d"]) == pu.SMOKE_SHAPE
  assert {"cpu", "cores", "jax", "jaxlib", "commit", "command", "devices"} <= set(per["machine"])
  ids = [lv["id"] for lv in per["levels"]]
  for lv in per["levels"]:  # every level's rho is its accounting's conversion of eps.
    assert lv["rho"] == accounting.epsilon_to_zcdp(lv["epsilon"], per["delta"], lv["accounting"])
  assert sorted((lv["epsilon"], lv["accounting"]) for lv in per["levels"]) == sorted(
      (e, m) for e in run_mode.epsilons for m in pu.ACCOUNTINGS)
  assert set(per["algorithms"]) == set(run_mode.algorithms)
  assert set(run_mode.algorithms) <= set(pu._harness.ALGORITHMS)
  for name_, rec in per["algorithms"].items():
    assert rec["family"] == pu._harness.algorithm_family(name_)
    ran = sorted(r["steps"] for r in rec["runs"])
    assert set(ran) <= set(run_mode.grids[rec["family"]])
    assert set(rec["timing"]) == {str(t) for t in pu.timed_steps(per)[name_]}
    assert set(rec["timing"]) <= {str(t) for t in ran}
    assert {str(b["steps"]) for b in rec["best"].values()} <= set(rec["timing"])
    assert all(t["seconds_run"] > 0 and t["seconds_compile"] > 0 for t in rec["timing"].values())
    assert all(t["executions"] in (1, pu.TIMING_RUNS) for t in rec["timing"].values())
    assert rec["start_excess"] > 0
    for i in ids:
      means = {r["steps"]: r["results"][i]["mean"] for r in rec["runs"] if i in r["results"]}
      best = rec["best"][i]
      assert best["mean"] == min(means.values()) and means[best["steps"]] == best["mean"]
      for r in rec["runs"]:
        if i in r["results"]:
          res = r["results"][i]
          assert len(res["excess_losses"]) == 3 and math.isfinite(res["mean"])
          assert res["mean"] == pytest.approx(np.mean(res["excess_losses"]), rel=1e-12)
  combined = json.loads((quick_run / "privacy_utility.json").read_text())
  assert {"schema", "machine", "quick", "datasets", "table", "summary", "reference"} <= set(combined)
  assert combined["table"] and all(set(r) == _ROW_KEYS for r in combined["table"])
  newton = [a for a in run_mode.algorithms if pu._harness.algorithm_family(a) == "second-order"]
  assert len(combined["table"]) == len(per["levels"]) * len(newton)
  for r in combined["table"]:
    assert r["loss_ratio"] == pytest.approx(r["mean"] / r["gd_mean"])
    assert r["time_ratio"] == pytest.approx(r["gd_seconds"] / r["seconds"])
    assert r["verdict"] in ("win", "tie", "loss")
  assert [(e["dataset"], e["epsilon"]) for e in combined["summary"]] == [
      (name, eps) for eps in sorted(run_mode.epsilons)]
  md = (quick_run / "privacy_utility.md").read_text()
  assert "Main table" in md and "Quick smoke run" in md and f"| {name} |" in md
  assert f"## {name} (n = {per['n']:,}, d = {per['d']}" in md


@pytest.mark.full
def test_quick_outputs_and_schema(pu, quick_run):
  """The quick run's own dataset, accountings and algorithms. Under ``--full`` the module's
  run is the quick run, so ``test_outputs_and_schema`` checks everything else of it."""
  per = json.loads((quick_run / "privacy_utility_synthetic.json").read_text())
  assert per["quick"] is True and per["repeats"] == 3 and per["dataset"] == "synthetic"
  assert {lv["accounting"] for lv in per["levels"]} == {"paper", "gaussian"}
  assert set(per["algorithms"]) == set(pu.QUICK_ALGORITHMS)
  assert "| synthetic |" in (quick_run / "privacy_utility.md").read_text()


def test_report_only_rebuilds(pu, quick_run, capsys):
  (quick_run / "privacy_utility.md").unlink()
  assert pu.main(["--quick", "--out-dir", str(quick_run), "--report-only"]) == 0
  assert (quick_run / "privacy_utility.md").exists()


def test_report_only_without_results_exits_2(pu, tmp_path, capsys):
  assert pu.main(["--out-dir", str(tmp_path), "--report-only"]) == 2
  assert "run the benchmark first" in capsys.readouterr().err


def test_smoke_needs_quick(pu, tmp_path, capsys):
  check_smoke_needs_quick(pu.main, tmp_path, capsys)


def test_missing_data_file_names_the_flag(pu, tmp_path, capsys):
  code = pu.main(["--datasets", "a9a", "--data-dir", str(tmp_path / "none"),
                  "--out-dir", str(tmp_path)])
  assert code == 2
  err = capsys.readouterr().err
  assert "--data-dir" in err and "a9a.bz2" in err


def _fake_fit_levels(curves):
  """A stand-in for training.fit_levels: mean loss = curves[rho](T), no noise."""
  def fit_levels(ds, algorithm, *, rhos, steps, repeats, **_):
    out = []
    for rho in rhos:
      mean = curves[rho](steps)
      out.append(types.SimpleNamespace(
          excess_loss_mean=mean, excess_loss_se=0.0, excess_losses=np.full(repeats, mean),
          guard_resets=np.zeros(repeats, int), seconds_compile=1.0, seconds_run=1.0,
          losses=np.full((repeats, steps + 1), 2.0), loss_star=0.0))  # start excess 2
    return out
  return fit_levels


def test_tune_early_stop_and_edge_extensions(pu, monkeypatch):
  curves = {
      1.0: lambda t: (t - 8) ** 2 + 1.0,  # U-shaped, best at 8.
      2.0: lambda t: 1.0 / t,             # decreasing: best always at the top.
  }
  monkeypatch.setattr(pu.training, "fit_levels", _fake_fit_levels(curves))
  levels = [{"id": "a", "rho": 1.0}, {"id": "b", "rho": 2.0}]
  quiet = lambda label: None  # noqa: E731
  rec = pu.tune(None, "hess-clip", levels, (2, 4, 8, 16, 32, 64, 128), 2, early_stop=True,
                extend=False, extend_down=True, max_steps=128, bar=quiet)
  # "a" stops after the first rise past its best (T = 16); "b" runs the whole grid.
  assert rec["best"]["a"] == {"steps": 8, "mean": 1.0, "se": 0.0, "at_grid_edge": False,
                              "stopped_after": 16}
  assert [r["steps"] for r in rec["runs"] if "a" in r["levels"]] == [2, 4, 8, 16]
  assert rec["best"]["b"]["steps"] == 128 and rec["best"]["b"]["at_grid_edge"]
  assert [r["levels"] for r in rec["runs"]][-1] == ["b"]
  assert rec["start_excess"] == 2.0
  # A level whose best is still above the start (diverging at small T) does not
  # stop at a rise: here 3.0, 4.0 (rise), then it recovers to 0.01 at T = 64.
  curves[3.0] = {2: 3.0, 4: 4.0, 8: 1.0, 16: 0.1, 32: 0.02, 64: 0.01, 1: 2.0}.get
  rec = pu.tune(None, "hess-clip", levels + [{"id": "c", "rho": 3.0}], (2, 4, 8, 16, 32, 64), 2,
                early_stop=True, extend=False, extend_down=True, max_steps=64, bar=quiet)
  assert rec["best"]["c"]["steps"] == 64 and rec["best"]["c"]["mean"] == 0.01
  rec = pu.tune(None, "dp-gd", levels, (25, 50, 100), 2, early_stop=False, extend=True,
                extend_down=True, max_steps=400, bar=quiet)
  # Only the top-edge level is extended up, by doubling, to max_steps; only the
  # bottom-edge level down, by halving, until its best is no longer the smallest T.
  assert [(r["steps"], r["levels"]) for r in rec["runs"]][3:] == [
      (200, ["b"]), (400, ["b"]), (12, ["a"]), (6, ["a"]), (3, ["a"])]
  assert rec["grid"] == [3, 6, 12, 25, 50, 100, 200, 400]
  assert rec["best"]["b"]["steps"] == 400 and rec["best"]["b"]["at_grid_edge"]
  assert rec["best"]["a"]["steps"] == 6 and not rec["best"]["a"]["at_grid_edge"]


def test_match_and_verdict(pu):
  rec = {"runs": [{"steps": t, "results": {"x": {"mean": m}}} for t, m in ((25, 0.5), (50, 0.2),
                                                                         (100, 0.1))]}
  assert pu._first_to_match(rec, "x", 0.2) == 50
  assert pu._first_to_match(rec, "x", 0.05) is None
  assert pu._verdict({"mean": 1.0, "se": 0.1}, {"mean": 1.25, "se": 0.1}) == "tie"
  assert pu._verdict({"mean": 1.0, "se": 0.1}, {"mean": 1.3, "se": 0.1}) == "win"
  assert pu._verdict({"mean": 1.3, "se": 0.1}, {"mean": 1.0, "se": 0.1}) == "loss"
