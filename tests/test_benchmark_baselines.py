"""Smoke test of ``benchmarks/baselines.py`` (its ``--quick --smoke`` run, its ``--quick`` run in
the full tier, and the exit on missing data)."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from conftest import check_smoke_needs_quick, load_benchmark


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("baselines")


_PRIVATE = {"aop": True, "damped-newton": False, "damped-newton-private": True,
            "dp-gd-oracle": False, "dp-gd": True}


def test_smoke_writes_results(bench, tmp_path: pathlib.Path) -> None:
  out = tmp_path / "out"
  assert bench.main(["--quick", "--smoke", "--out-dir", str(out)]) == 0
  payload = json.loads((out / "baselines.json").read_text())
  for key in ("schema", "machine", "quick", "smoke", "dataset", "n", "d", "delta", "loss_star",
              "ridge", "seeds", "epsilons", "aop_decreasing", "rows", "seconds_total"):
    assert key in payload, key
  assert payload["quick"] is True and payload["smoke"] is True and "cpu" in payload["machine"]
  assert (payload["n"], payload["d"]) == bench.QUICK_SHAPE and payload["dataset"] == "synthetic"
  assert payload["delta"] == pytest.approx(payload["n"] ** -2)
  assert payload["seeds"] == bench.QUICK_SEEDS
  assert payload["epsilons"] == list(bench.QUICK_EPSILONS)
  assert payload["aop_decreasing"] is None  # a single epsilon
  rows = payload["rows"]
  assert [r["method"] for r in rows] == list(bench.SMOKE_METHODS)
  assert set(bench.SMOKE_METHODS) < set(bench.METHODS)
  # One method of each kind: AOP, an iterative baseline, a method of the paper; both privacies.
  assert {"aop", "dp-gd"} < set(bench.SMOKE_METHODS)
  assert {_PRIVATE[m] for m in bench.SMOKE_METHODS} == {True, False}
  for r in rows:
    assert r["private"] is _PRIVATE[r["method"]], r["method"]
    assert r["epsilon"] == 1.0
    assert len(r["excess_losses"]) == bench.QUICK_SEEDS
    # -1e-12: float64 means over the 2,000 rows and the float64 Newton optimum round at
    # ~1e-16 (every method here adds noise, so its excess is far above either).
    assert all(math.isfinite(v) and v > -1e-12 for v in r["excess_losses"])
    assert r["median"] == pytest.approx(float(np.median(r["excess_losses"])))
    assert r["q25"] <= r["median"] <= r["q75"]
    assert (r["rho"] is None) is (r["method"] == "aop")
    assert r["steps"] == (None if r["method"] == "aop" else bench.QUICK_STEPS[r["method"]])
    assert r["guard_resets"] >= 0 and r["seconds"] > 0
  md = (out / "baselines.md").read_text()
  assert "| method | private | T |" in md and "| damped-newton | **no** |" in md
  assert "| aop | yes | — |" in md and f"| dp-gd | yes | {bench.QUICK_STEPS['dp-gd']} |" in md
  assert "| dp-gd-oracle |" not in md  # methods that did not run have no row


def test_smoke_needs_quick(bench, tmp_path, capsys):
  check_smoke_needs_quick(bench.main, tmp_path, capsys)


@pytest.mark.full
def test_quick_writes_results(bench, tmp_path: pathlib.Path) -> None:
  out = tmp_path / "out"
  assert bench.main(["--quick", "--out-dir", str(out)]) == 0
  payload = json.loads((out / "baselines.json").read_text())
  for key in ("schema", "machine", "quick", "dataset", "n", "d", "delta", "loss_star",
              "seeds", "epsilons", "aop_decreasing", "rows", "seconds_total"):
    assert key in payload, key
  assert payload["quick"] is True and "cpu" in payload["machine"]
  assert payload["delta"] == pytest.approx(payload["n"] ** -2)
  assert payload["aop_decreasing"] is None  # a single epsilon in --quick
  rows = payload["rows"]
  assert {r["method"] for r in rows} == set(bench.METHODS)
  assert len(rows) == len(bench.METHODS) * len(bench.QUICK_EPSILONS)
  private = {"aop": True, "damped-newton": False, "damped-newton-private": True,
             "dp-gd-oracle": False, "dp-gd": True}
  for r in rows:
    assert r["private"] is private[r["method"]], r["method"]
    assert len(r["excess_losses"]) == bench.QUICK_SEEDS
    # -1e-12: float64 means over the 2,000 rows and the float64 Newton optimum round at
    # ~1e-16 (every method here adds noise, so its excess is far above either).
    assert all(math.isfinite(v) and v > -1e-12 for v in r["excess_losses"])
    assert r["q25"] <= r["median"] <= r["q75"]
    assert (r["rho"] is None) is (r["method"] == "aop")
    assert (r["steps"] is None) is (r["method"] == "aop")
  md = (out / "baselines.md").read_text()
  assert "| method | private | T |" in md and "| dp-gd-oracle | **no** |" in md


def test_missing_data_file_exits_2(bench, tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture) -> None:
  status = bench.main(["--data-dir", str(tmp_path / "no-such-dir"),
                       "--out-dir", str(tmp_path / "out")])
  assert status == 2
  assert "--data-dir" in capsys.readouterr().err
  assert not (tmp_path / "out" / "baselines.json").exists()
