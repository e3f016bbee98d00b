"""Smoke test of ``benchmarks/convergence.py`` (its ``--quick --smoke`` run, its ``--quick`` run in
the full tier, and the exit on missing data)."""

from __future__ import annotations

import json
import math
import pathlib
from types import ModuleType

import pytest

from conftest import check_smoke_needs_quick, known_optima, load_benchmark
from dpjax import data
from dpjax.problem import solve


_RUN_KEYS = {
    "algorithm": str,
    "family": str,
    "steps": int,
    "seconds_compile": float,
    "seconds_run": float,
    "seconds_run_per_repeat": float,
    "seconds_per_step": float,
    "excess_loss_curve": list,
    "excess_loss_se_curve": list,
    "final_excess_loss_mean": float,
    "final_excess_loss_se": float,
    "guard_resets_total": int,
    "seconds_to_target": dict,
}
_SETTING_KEYS = {
    "dataset": str,
    "n": int,
    "d": int,
    "delta": float,
    "rho": float,
    "accounting": str,
    "repeats": int,
    "loss_star": float,
    "png": str,
    "step_grids": dict,
    "runs": list,
}


@pytest.fixture(scope="module")
def convergence() -> ModuleType:
  return load_benchmark("convergence")


@pytest.fixture(scope="module")
def smoke_run(convergence: ModuleType, tmp_path_factory: pytest.TempPathFactory):
  out = tmp_path_factory.mktemp("convergence-smoke")
  status = convergence.main(["--quick", "--smoke", "--out-dir", str(out)])
  return status, out


@pytest.fixture(scope="module")
def quick_run(convergence: ModuleType, tmp_path_factory: pytest.TempPathFactory):
  out = tmp_path_factory.mktemp("convergence")
  with known_optima():  # skips seconds of float64 Newton (the solver: test_solve.py)
    status = convergence.main(["--quick", "--out-dir", str(out)])
  return status, out


def _check_types(record: dict, keys: dict, where: str) -> None:
  for key, kind in keys.items():
    assert key in record, f"{where}: missing {key!r}"
    value = record[key]
    if kind is float:
      assert isinstance(value, (int, float)) and not isinstance(value, bool), (where, key, value)
      assert math.isfinite(value), (where, key, value)
    else:
      assert isinstance(value, kind) and not isinstance(value, bool), (where, key, value)


def test_smoke_writes_schema(convergence: ModuleType, smoke_run) -> None:
  status, out = smoke_run
  assert status == 0
  payload = json.loads((out / "convergence.json").read_text())
  for key in ("schema", "machine", "quick", "smoke", "epsilon", "accounting", "init", "seed",
              "time_axis", "settings", "seconds_total"):
    assert key in payload, key
  assert payload["quick"] is True and payload["smoke"] is True
  assert payload["epsilon"] == 1.0 and payload["accounting"] == "gaussian"
  assert isinstance(payload["machine"], dict) and "cpu" in payload["machine"]
  name, (n, d) = convergence.SMOKE_DATASET
  (setting,) = payload["settings"]
  _check_types(setting, _SETTING_KEYS, name)
  assert (setting["dataset"], setting["n"], setting["d"]) == (name, n, d)
  ds = data.synthetic(convergence.SEED, n=n, d=d)
  assert setting["loss_star"] == pytest.approx(solve.optimum_loss(ds.x, ds.y)[0], rel=1e-12)
  assert setting["accounting"] == "gaussian"
  assert setting["repeats"] == convergence.SMOKE_REPEATS
  assert setting["delta"] == pytest.approx(n ** -2)
  assert setting["rho"] > 0
  assert setting["step_grids"] == {f: list(t) for f, t in convergence.SMOKE_STEP_GRIDS.items()}
  assert (out / setting["png"]).stat().st_size > 0
  # One run per algorithm of both families (one T each).
  assert sorted((r["algorithm"], r["steps"]) for r in setting["runs"]) == sorted(
      (a, convergence.SMOKE_STEP_GRIDS[convergence._harness.algorithm_family(a)][0])
      for a in convergence.QUICK_ALGORITHMS)
  finals = [r["final_excess_loss_mean"] for r in setting["runs"]]
  assert setting["best_final_excess_loss"] == min(finals)
  for run in setting["runs"]:
    where = f"{setting['dataset']}/{run['algorithm']}/T={run['steps']}"
    _check_types(run, _RUN_KEYS, where)
    assert run["family"] == convergence._harness.algorithm_family(run["algorithm"])
    for key in ("excess_loss_curve", "excess_loss_se_curve"):
      curve = run[key]
      assert len(curve) == run["steps"] + 1, (where, key)
      assert all(isinstance(v, float) and math.isfinite(v) for v in curve), (where, key)
    assert run["excess_loss_curve"][-1] == run["final_excess_loss_mean"]
    assert run["excess_loss_se_curve"] == [0.0] * (run["steps"] + 1)  # one repeat
    assert run["seconds_run"] > 0 and run["seconds_compile"] > 0
    assert run["seconds_run_per_repeat"] == pytest.approx(run["seconds_run"] / setting["repeats"])
    assert run["seconds_per_step"] == pytest.approx(run["seconds_run"] / run["steps"])
    assert run["guard_resets_total"] >= 0
    # Time to a target: the first step whose mean excess is within the factor of the best.
    best = setting["best_final_excess_loss"]
    step_s = run["seconds_run"] / run["steps"] / setting["repeats"]
    for label, factor in convergence.TARGET_FACTORS:
      hits = [k for k, v in enumerate(run["excess_loss_curve"]) if v <= factor * best]
      expected = hits[0] * step_s if hits and best > 0 else None
      assert run["seconds_to_target"][label] == (
          None if expected is None else pytest.approx(expected)), (where, label)
    if (run["algorithm"], run["steps"]) == (setting["best_run"]["algorithm"],
                                            setting["best_run"]["steps"]):
      assert run["seconds_to_target"]["1.1x"] is not None


def test_smoke_writes_markdown_and_png(convergence: ModuleType, smoke_run) -> None:
  status, out = smoke_run
  assert status == 0
  md = (out / "convergence.md").read_text()
  name = convergence.SMOKE_DATASET[0]
  assert md.startswith("# Convergence: excess loss against wall-clock time (quick, smoke)")
  assert f"](convergence_{name}.png)" in md
  assert "| algorithm |" in md
  for a in convergence.QUICK_ALGORITHMS:
    assert f"| {a} | {convergence._harness.algorithm_family(a)} |" in md
  png = out / f"convergence_{name}.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smoke_needs_quick(convergence, tmp_path, capsys):
  check_smoke_needs_quick(convergence.main, tmp_path, capsys)


@pytest.mark.full
def test_quick_writes_schema(convergence: ModuleType, quick_run) -> None:
  status, out = quick_run
  assert status == 0
  payload = json.loads((out / "convergence.json").read_text())
  for key in ("schema", "machine", "quick", "epsilon", "settings", "seconds_total"):
    assert key in payload, key
  assert payload["quick"] is True
  assert payload["epsilon"] == 1.0
  assert isinstance(payload["machine"], dict) and "cpu" in payload["machine"]
  assert [s["dataset"] for s in payload["settings"]] == list(convergence.QUICK_DATASETS)

  algorithms = set(convergence.QUICK_ALGORITHMS)
  assert algorithms <= set(convergence._harness.ALGORITHMS)
  assert {convergence._harness.algorithm_family(a) for a in algorithms} == {
      "first-order", "second-order"}
  for setting in payload["settings"]:
    _check_types(setting, _SETTING_KEYS, setting["dataset"])
    assert setting["accounting"] == "gaussian"
    assert setting["repeats"] == convergence.QUICK_REPEATS
    assert setting["delta"] == pytest.approx(setting["n"] ** -2)
    assert setting["rho"] > 0
    assert (out / setting["png"]).stat().st_size > 0
    assert {r["algorithm"] for r in setting["runs"]} == algorithms
    for run in setting["runs"]:
      where = f"{setting['dataset']}/{run['algorithm']}/T={run['steps']}"
      _check_types(run, _RUN_KEYS, where)
      assert run["family"] == convergence._harness.algorithm_family(run["algorithm"])
      assert run["steps"] in convergence.QUICK_STEP_GRIDS[run["family"]]
      for key in ("excess_loss_curve", "excess_loss_se_curve"):
        curve = run[key]
        assert len(curve) == run["steps"] + 1, (where, key)
        assert all(isinstance(v, float) and math.isfinite(v) for v in curve), (where, key)
      assert run["excess_loss_curve"][-1] == run["final_excess_loss_mean"]
      assert all(v >= 0 for v in run["excess_loss_se_curve"])
      assert run["seconds_run"] > 0 and run["seconds_compile"] > 0
      assert run["seconds_per_step"] > 0 and run["seconds_run_per_repeat"] > 0
      assert run["guard_resets_total"] >= 0
      assert set(run["seconds_to_target"]) == {"2x", "1.1x"}
      # The best run reaches its own final loss.
      if (run["algorithm"], run["steps"]) == (setting["best_run"]["algorithm"],
                                              setting["best_run"]["steps"]):
        assert run["seconds_to_target"]["1.1x"] is not None


@pytest.mark.full
def test_quick_writes_markdown_and_png(quick_run) -> None:
  status, out = quick_run
  assert status == 0
  md = (out / "convergence.md").read_text()
  assert "](convergence_synthetic.png)" in md
  assert "| algorithm |" in md
  png = out / "convergence_synthetic.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_data_file_exits_2(convergence: ModuleType, tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture) -> None:
  status = convergence.main(["--quick", "--datasets", "a9a",
                             "--data-dir", str(tmp_path / "no-such-dir"),
                             "--out-dir", str(tmp_path / "out")])
  assert status == 2
  assert "--data-dir" in capsys.readouterr().err
  assert not (tmp_path / "out" / "convergence.json").exists()
