"""Smoke test of ``benchmarks/baselines.py`` (its ``--quick`` run and the exit on missing data)."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("baselines")


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
