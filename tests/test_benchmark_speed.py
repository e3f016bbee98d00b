"""Smoke test of ``benchmarks/speed.py``: a ``--quick`` run (synthetic shape only) and its output schema."""

from __future__ import annotations

import json
import math
import pathlib
from types import ModuleType
from typing import Any

import pytest

from conftest import load_benchmark


_PER_ITERATION = {
    "dataset": str, "n": int, "d": int, "algorithm": str, "family": str, "ms_median": float,
    "ms_min": float, "reps": int, "baseline": str, "baseline_ms": float,
    "baseline_ms_min": float, "ratio": float, "target": float, "met": bool,
    "compile_s": float, "baseline_compile_s": float, "float_ms": float, "float_ms_min": float,
    "float_compile_s": float, "exact_over_float": float, "compile_exact_over_float": float,
    "exact_ms": float, "exact_ms_min": float, "twin_reps": int, "fit_compile_s": float,
    "float_fit_compile_s": float, "fit_compile_exact_over_float": float,
}
_SCALING = {
    "axis": str, "n": int, "d": int, "algorithm": str, "ms_median": float, "ms_min": float,
    "reps": int, "baseline": str, "baseline_ms": float, "baseline_ms_min": float,
    "ratio": float, "compile_s": float, "float_ms": float, "float_ms_min": float,
    "float_compile_s": float, "exact_over_float": float, "compile_exact_over_float": float,
    "exact_ms": float, "exact_ms_min": float, "twin_reps": int,
}
_REPEATS = {
    "dataset": str, "n": int, "d": int, "algorithm": str, "steps": int, "repeats": int,
    "one_ms": float, "one_ms_min": float, "many_ms": float, "many_ms_min": float,
    "ratio": float, "reps": int, "target": (float, type(None)), "met": (bool, type(None)),
    "compile_one_s": float, "compile_many_s": float,
}
_MEMORY = {
    "dataset": str, "n": int, "d": int, "algorithm": str, "steps": int, "dataset_bytes": int,
    "xla_argument_bytes": int, "xla_output_bytes": int, "xla_alias_bytes": int,
    "xla_temp_bytes": int, "xla_total_bytes": int, "xla_total_ratio": float,
    "xla_temp_ratio": float, "rss_before_bytes": int, "rss_peak_increase_bytes": int,
    "rss_increase_ratio": float, "rss_total_ratio": float, "rss_method": str,
    "target": float, "met": bool, "compile_s": float, "run_s": float,
}


@pytest.fixture(scope="module")
def speed() -> ModuleType:
  return load_benchmark("speed")


@pytest.fixture(scope="module")
def quick_run(speed: ModuleType,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, Any]]:
  out = tmp_path_factory.mktemp("speed")
  # The synthetic shape alone (every section runs on it, the scaling section too with
  # --smoke; the file datasets' loading is test_missing_data_file_exits_2's) and the fewest
  # reps: smaller than a plain --quick.
  assert speed.main(["--quick", "--smoke", "--datasets", "covertype-synthetic", "--reps", "3",
                     "--out-dir", str(out)]) == 0
  return out, json.loads((out / "speed.json").read_text())


def _check_rows(rows: list[dict[str, Any]], schema: dict[str, Any]) -> None:
  assert rows, "section is empty"
  for row in rows:
    assert set(row) == set(schema), sorted(set(row) ^ set(schema))
    for key, kind in schema.items():
      value = row[key]
      kinds = kind if isinstance(kind, tuple) else (kind,)
      if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # JSON writes 3.0 as 3.0, but be lenient.
      assert isinstance(value, kinds), (key, value)
      if isinstance(value, float):
        assert math.isfinite(value), (key, value)


def _positive(*values: float) -> None:
  for v in values:
    assert math.isfinite(v) and v > 0, v


def test_quick_outputs_and_schema(quick_run: tuple[pathlib.Path, dict[str, Any]],
                                  speed: ModuleType) -> None:
  out, payload = quick_run
  assert (out / "speed.md").stat().st_size > 0
  png = (out / "speed_scaling.png").read_bytes()
  assert png.startswith(b"\x89PNG")
  for key in ("schema", "machine", "quick", "settings", "elapsed_s", "per_iteration",
              "scaling", "repeats", "memory"):
    assert key in payload, key
  assert payload["quick"] is True
  assert isinstance(payload["machine"], dict) and "cpu" in payload["machine"]

  _check_rows(payload["per_iteration"], _PER_ITERATION)
  _check_rows(payload["scaling"], _SCALING)
  _check_rows(payload["repeats"], _REPEATS)
  _check_rows(payload["memory"], _MEMORY)

  per_iter = payload["per_iteration"]
  assert {r["algorithm"] for r in per_iter} == set(speed.QUICK_ALGORITHMS)
  assert {r["family"] for r in per_iter} == {"first-order", "second-order"}
  for r in per_iter:
    _positive(r["ms_median"], r["ms_min"], r["baseline_ms"], r["baseline_ms_min"], r["compile_s"])
    assert r["ms_min"] <= r["ms_median"] and r["baseline_ms_min"] <= r["baseline_ms"]
    assert r["ratio"] == pytest.approx(r["ms_median"] / r["baseline_ms"])
    assert r["met"] == (r["ratio"] <= r["target"])
    assert r["family"] == speed._harness.algorithm_family(r["algorithm"])
    assert r["baseline"] == speed.BASELINE_NAMES[r["family"]]
    _positive(r["exact_ms"], r["float_ms"], r["exact_over_float"], r["fit_compile_s"],
              r["float_fit_compile_s"])
    assert r["exact_ms_min"] <= r["exact_ms"] and r["float_ms_min"] <= r["float_ms"]
    assert r["twin_reps"] >= 3
    assert r["compile_exact_over_float"] == pytest.approx(r["compile_s"] / r["float_compile_s"])
    assert r["fit_compile_exact_over_float"] == pytest.approx(
        r["fit_compile_s"] / r["float_fit_compile_s"])

  assert {r["axis"] for r in payload["scaling"]} == {"n", "d"}
  assert {r["algorithm"] for r in payload["scaling"]} == set(speed.QUICK_SCALING_ALGORITHMS)
  assert {r["algorithm"] for r in payload["repeats"]} == set(speed.QUICK_REPEAT_ALGORITHMS)
  for r in payload["scaling"]:
    _positive(r["ms_median"], r["ms_min"], r["baseline_ms"], r["compile_s"])
    assert r["ratio"] == pytest.approx(r["ms_median"] / r["baseline_ms"])

  for r in payload["repeats"]:
    _positive(r["one_ms"], r["many_ms"], r["one_ms_min"], r["many_ms_min"])
    assert r["ratio"] == pytest.approx(r["many_ms"] / r["one_ms"])
    assert r["repeats"] == speed.REPEATS
    if r["target"] is not None:
      assert r["met"] == (r["ratio"] <= r["target"])

  assert {r["algorithm"] for r in payload["memory"]} == set(speed.MEMORY_ALGORITHMS)
  for r in payload["memory"]:
    _positive(r["dataset_bytes"], r["xla_total_bytes"], r["run_s"])
    assert r["xla_total_bytes"] == (r["xla_argument_bytes"] + r["xla_output_bytes"]
                                    - r["xla_alias_bytes"] + r["xla_temp_bytes"])
    # The program's arguments hold the data.
    assert r["xla_argument_bytes"] >= r["dataset_bytes"]
    assert r["xla_total_ratio"] == pytest.approx(r["xla_total_bytes"] / r["dataset_bytes"])
    assert r["xla_temp_ratio"] == pytest.approx(r["xla_temp_bytes"] / r["dataset_bytes"])
    assert r["rss_increase_ratio"] == pytest.approx(
        r["rss_peak_increase_bytes"] / r["dataset_bytes"])
    assert r["rss_peak_increase_bytes"] >= 0
    assert r["met"] == (r["xla_total_ratio"] <= r["target"])


def test_missing_data_file_exits_2(speed: ModuleType, tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture) -> None:
  code = speed.main(["--quick", "--data-dir", "/nonexistent", "--datasets", "a1a.t",
                     "--out-dir", str(tmp_path)])
  assert code == 2
  err = capsys.readouterr().err
  assert "--data-dir" in err and "a1a.t" in err
  assert not (tmp_path / "speed.json").exists()
