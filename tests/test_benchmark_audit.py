"""Smoke test of ``benchmarks/audit.py`` on one mechanism (the CI audits are in ``tests/audit/``)."""

from __future__ import annotations

import json
import pathlib

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
  return load_benchmark("audit")


def test_one_mechanism_writes_the_table(bench, tmp_path: pathlib.Path) -> None:
  out = tmp_path / "out"
  rc = bench.main(["--quick", "--mechanisms", "dp-gd-1-step", "--out-dir", str(out)])
  assert rc == 0
  payload = json.loads((out / "audit.json").read_text())
  assert payload["quick"] is True and "cpu" in payload["machine"]
  rows = payload["rows"]
  assert [(r["mechanism"], r["twin"]) for r in rows] == [
      ("dp-gd-1-step", None), ("dp-gd-1-step", "noise/2"), ("dp-gd-1-step", "2x-sensitivity")]
  ok, *twins = rows
  assert ok["num_samples"] == 4000 and ok["evaluated_samples"] == [2000, 2000]
  assert all(r["passed"] for r in rows)
  assert ok["lower_bound"] <= ok["claimed_epsilon"]
  assert all(t["lower_bound"] > t["claimed_epsilon"] for t in twins)
  assert ok["compile_seconds"] > 0 and twins[1]["compile_seconds"] == 0.0
  md = (out / "audit.md").read_text()
  assert "| dp-gd-1-step | gradient | zero-out | 1.1603 (0.1) |" in md and "| yes |" in md
  assert "command:" in md and "`dp_gd(steps=1)`" in md


@pytest.mark.parametrize("argv, match", [
    (["--num-samples", "100"], "must be >= 1000"),
    (["--host-samples", "10"], "must be >= 1000"),
    (["--mechanisms", "dp-magic"], "unknown mechanisms"),
])
def test_bad_arguments_exit_with_usage(bench, argv, match, capsys, tmp_path) -> None:
  with pytest.raises(SystemExit) as err:
    bench.main(argv + ["--out-dir", str(tmp_path)])
  assert err.value.code == 2
  assert match in capsys.readouterr().err
