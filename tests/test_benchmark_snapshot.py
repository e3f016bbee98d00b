"""benchmarks/snapshot.py: the fixed-seed fingerprints reproduce and any change is reported."""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import snapshot  # noqa: E402  pylint: disable=g-import-not-at-top

from dpjax import training  # noqa: E402


def test_every_fit_algorithm_is_fingerprinted():
  names = snapshot.algorithms()
  assert len(names) == len(set(names))
  for group in (training.ALGORITHMS, training.DRIVER_ALGORITHMS, training.STREAMING_ALGORITHMS):
    assert set(group) <= set(names)
  assert training.AUTO in names


def test_write_then_check_is_identical_and_a_change_is_caught(tmp_path, capsys):
  path = tmp_path / "snap.json"
  assert snapshot.main(["--write", str(path), "--only", "dp-gd"]) == 0
  record = json.loads(path.read_text())
  fp = record["fingerprints"]["dp-gd"]
  assert fp["private"] and fp["params_shape"] == [2, snapshot.D]
  assert snapshot.main(["--check", str(path), "--only", "dp-gd"]) == 0
  assert "bit-identical" in capsys.readouterr().out
  fp["excess_losses"][0] = float.hex(float.fromhex(fp["excess_losses"][0]) * (1 + 2**-40))
  path.write_text(json.dumps(record))
  assert snapshot.main(["--check", str(path), "--only", "dp-gd"]) == 1
  assert "dp-gd: excess_losses differ" in capsys.readouterr().out


def test_compare_reports_missing_and_moved_entries():
  a = {"x": {"k": 1}, "y": {"k": 2}}
  b = {"x": {"k": 1}, "y": {"k": 3}, "z": {"k": 0}}
  assert snapshot.compare(a, b) == ["y: k differ", "z: only in after"]
