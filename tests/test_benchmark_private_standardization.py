"""Smoke test of ``benchmarks/private_standardization.py`` (its ``--quick --smoke`` run, its
``--quick`` run on a1a.t in the full tier, and the exit on missing data)."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from conftest import DATA_DIR, check_smoke_needs_quick, load_benchmark, shared_data_file


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("private_standardization")


def _cells(bench, ds: dict) -> dict:
  """A dataset's cells by variant, after the checks every run must pass: the three variants
  (two private), the standardization's share of the budget, and one budget for all three."""
  cells = {c["variant"]: c for c in ds["cells"]}
  assert set(cells) == set(bench.VARIANTS)
  assert [cells[v]["private"] for v in bench.VARIANTS] == [True, True, False]
  std = cells["private-standardization"]
  assert std["rho_standardization"] == pytest.approx(bench.BUDGET_SHARE * std["rho_total"])
  assert std["rho_spent"] == pytest.approx(std["rho_total"], rel=1e-6)  # the total includes it
  for c in cells.values():
    # The same budget for all three (to the last bits: the exact noise's slack reserve).
    assert c["rho_total"] == pytest.approx(cells["per-row"]["rho_total"], rel=1e-12)
    assert all(math.isfinite(v) and v > 0 for v in c["test_loss"] + c["train_loss"])
  return cells


def test_smoke_writes_results(bench, tmp_path: pathlib.Path) -> None:
  out = tmp_path / "out"
  # No --data-dir: the smoke run's data are generated.
  assert bench.main(["--quick", "--smoke", "--data-dir", str(tmp_path / "no-such-dir"),
                     "--out-dir", str(out)]) == 0
  payload = json.loads((out / "private_standardization.json").read_text())
  assert payload["quick"] is True and payload["smoke"] is True and "cpu" in payload["machine"]
  assert payload["runs"] == bench.SMOKE_RUNS == 1
  assert payload["epsilons"] == list(bench.QUICK["epsilons"])
  assert list(payload["algorithms"]) == list(bench.QUICK["algorithms"])
  assert payload["bounds"] == list(bench.BOUNDS) and payload["budget_share"] == bench.BUDGET_SHARE
  name, n, d = bench.SMOKE_DATASET
  (ds,) = payload["datasets"]
  assert ds["dataset"] == name and ds["n_train"] + ds["n_test"] == ds["n"] == n
  assert ds["n_test"] == round(0.2 * n) and ds["features"] == d
  assert 0.5 <= ds["majority_test_accuracy"] <= 1 and ds["release_seconds"] > 0
  cells = _cells(bench, ds)
  for c in cells.values():
    assert c["delta"] == pytest.approx(ds["n_train"] ** -2)
    assert c["steps"] == bench.ALGORITHMS[c["algorithm"]]["steps"]
    assert len(c["test_accuracy"]) == 1 and all(0 <= a <= 1 for a in c["test_accuracy"])
    assert c["test_accuracy_se"] == 0.0  # one run
  md = (out / "private_standardization.md").read_text()
  assert "paper standardization (NOT PRIVATE) | **no** |" in md and "- command: `" in md
  assert f"## {name} (n = {n}:" in md


def test_smoke_dataset_is_binary_with_both_labels(bench) -> None:
  ds = bench.smoke_dataset()
  assert ds.x.shape == bench.SMOKE_DATASET[1:] and ds.x.dtype == np.float32
  assert set(np.unique(ds.x)) == {0.0, 1.0}  # inside the public bounds [0, 1]
  assert set(np.unique(ds.y)) == {-1.0, 1.0}


def test_smoke_needs_quick(bench, tmp_path, capsys):
  check_smoke_needs_quick(bench.main, tmp_path, capsys)


@pytest.mark.full
def test_quick_writes_results(bench, tmp_path: pathlib.Path) -> None:
  shared_data_file("a1a.t.bz2")
  out = tmp_path / "out"
  assert bench.main(["--quick", "--data-dir", str(DATA_DIR), "--out-dir", str(out)]) == 0
  payload = json.loads((out / "private_standardization.json").read_text())
  assert payload["quick"] is True and "cpu" in payload["machine"] and payload["runs"] == 2
  (ds,) = payload["datasets"]
  assert ds["dataset"] == "a1a.t" and ds["n_train"] + ds["n_test"] == ds["n"] == 30956
  cells = _cells(bench, ds)
  for c in cells.values():
    assert len(c["test_accuracy"]) == 2 and all(0.7 < a <= 1 for a in c["test_accuracy"])
  md = (out / "private_standardization.md").read_text()
  assert "paper standardization (NOT PRIVATE) | **no** |" in md and "- command: `" in md


def test_missing_data_file_exits_2(bench, tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture) -> None:
  status = bench.main(["--data-dir", str(tmp_path / "no-such-dir"), "--out-dir", str(tmp_path)])
  assert status == 2 and "--data-dir" in capsys.readouterr().err
  assert not (tmp_path / "private_standardization.json").exists()
