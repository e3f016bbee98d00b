"""benchmarks/online_to_batch.py --speed --quick: runs, and writes its documented results."""

from __future__ import annotations

import json

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def ob():
  return load_benchmark("online_to_batch")


def test_speed_quick_writes_results(ob, tmp_path):
  assert ob.main(["--speed", "--quick", "--out-dir", str(tmp_path), "--reps", "3"]) == 0
  payload = json.loads((tmp_path / f"{ob.STEM}.json").read_text())
  assert payload["quick"] is True and payload["dim"] == 100 and payload["batch"] == 1024
  names = [r["variant"] for r in payload["rows"]]
  assert names[0].startswith("non-private") and len(names) == 5
  assert payload["rows"][0]["ratio_in_scan"] == pytest.approx(1.0)
  for r in payload["rows"]:
    assert r["per_call_ms"] > 0 and r["in_scan_ms"] > 0 and r["compile_seconds"] > 0
    assert r["ratio_in_scan"] == pytest.approx(r["in_scan_ms"] / payload["rows"][0]["in_scan_ms"])
  md = (tmp_path / f"{ob.STEM}.md").read_text()
  assert "criterion" in md and "machine:" in md


def test_needs_speed_flag(ob, tmp_path, capsys):
  with pytest.raises(SystemExit):
    ob.main(["--out-dir", str(tmp_path)])
  assert "--speed" in capsys.readouterr().err
