"""Smoke test of ``benchmarks/private_standardization.py`` (its ``--quick`` run and the exit on missing data)."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from conftest import DATA_DIR, load_benchmark, shared_data_file


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("private_standardization")


def test_quick_writes_results(bench, tmp_path: pathlib.Path) -> None:
  shared_data_file("a1a.t.bz2")
  out = tmp_path / "out"
  assert bench.main(["--quick", "--data-dir", str(DATA_DIR), "--out-dir", str(out)]) == 0
  payload = json.loads((out / "private_standardization.json").read_text())
  assert payload["quick"] is True and "cpu" in payload["machine"] and payload["runs"] == 2
  (ds,) = payload["datasets"]
  assert ds["dataset"] == "a1a.t" and ds["n_train"] + ds["n_test"] == ds["n"] == 30956
  cells = {c["variant"]: c for c in ds["cells"]}
  assert set(cells) == set(bench.VARIANTS)
  assert [cells[v]["private"] for v in bench.VARIANTS] == [True, True, False]
  std = cells["private-standardization"]
  assert std["rho_standardization"] == pytest.approx(bench.BUDGET_SHARE * std["rho_total"])
  assert std["rho_spent"] == pytest.approx(std["rho_total"], rel=1e-6)  # the total includes it
  for c in cells.values():
    assert c["rho_total"] == cells["per-row"]["rho_total"]  # the same budget for all three
    assert len(c["test_accuracy"]) == 2 and all(0.7 < a <= 1 for a in c["test_accuracy"])
    assert all(math.isfinite(v) and v > 0 for v in c["test_loss"] + c["train_loss"])
  md = (out / "private_standardization.md").read_text()
  assert "paper standardization (NOT PRIVATE) | **no** |" in md and "- command: `" in md


def test_missing_data_file_exits_2(bench, tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture) -> None:
  status = bench.main(["--data-dir", str(tmp_path / "no-such-dir"), "--out-dir", str(tmp_path)])
  assert status == 2 and "--data-dir" in capsys.readouterr().err
  assert not (tmp_path / "private_standardization.json").exists()
