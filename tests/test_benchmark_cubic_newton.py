"""Smoke test of ``benchmarks/cubic_newton.py``: its ``--quick`` run and the results it writes."""

from __future__ import annotations

import json
import math

import pytest

from conftest import load_benchmark
from dpjax import accounting


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
  bench = load_benchmark("cubic_newton")
  out = tmp_path_factory.mktemp("cubic_newton")
  assert bench.main(["--quick", "--out-dir", str(out)]) == 0
  payload = json.loads((out / f"{bench.STEM}.json").read_text())
  return bench, payload, (out / f"{bench.STEM}.md").read_text()


def test_quick_run_records_a_private_comparison(quick):
  bench, payload, md = quick
  cfg = bench.QUICK
  s = payload["settings"]
  assert payload["quick"] is True and s["n"] == cfg["n"] and s["d"] == cfg["d"]
  assert s["delta"] == pytest.approx(cfg["n"] ** -2)
  assert s["rho"] == pytest.approx(accounting.epsilon_to_zcdp(1.0, s["delta"], "gaussian"))
  assert payload["reference"]["norm_w_star"] < cfg["radius"]
  assert payload["reference"]["grad_norm_at_w_star"] < 1e-10
  cubic, gd = payload["cubic_newton"], payload["dp_gd"]
  assert [r["steps"] for r in cubic] == list(cfg["cubic_steps"])
  assert len(gd) == len(cfg["gd_steps"]) * len(cfg["gd_learning_rates"])
  for r in cubic:
    assert r["rho_spent"] == pytest.approx(s["rho"], rel=1e-12)
    # -1e-12: float64 objectives round at ~1e-16; these noisy runs sit far above it.
    assert len(r["excess"]) == cfg["seeds"] and min(r["excess"]) > -1e-12
    assert r["max_norm"] <= cfg["radius"] * (1 + 1e-9)
    big_n = math.ceil(2 * (s["rho"] / r["steps"]) * payload["constants"]["(A/B)^2"]
                      * cfg["n"] ** 2 / cfg["d"])
    assert r["inner_steps_per_outer"] == big_n
    assert r["inner_steps_total"] == r["steps"] * big_n and r["oracle_calls"] == r["steps"]
    assert r["seconds_run_all_seeds"] > 0 and r["seconds_compile"] > 0
  for r in gd:
    assert r["rho_spent"] == pytest.approx(s["rho"], rel=1e-12)
    assert min(r["excess"]) > -1e-12  # float64 rounding (~1e-16), as for cubic Newton
  best = payload["best"]
  assert best["cubic_newton"]["median_excess"] == min(r["median_excess"] for r in cubic)
  assert best["dp_gd"]["median_excess"] == min(r["median_excess"] for r in gd)
  assert best["ratio_cubic_over_dp_gd"] == pytest.approx(
      best["cubic_newton"]["median_excess"] / best["dp_gd"]["median_excess"])
  # Without the noise the same solver is far more accurate: the gap is the privacy noise.
  quiet = payload["diagnostic_cubic_newton_without_noise"]
  # -1e-12: noise off, the excess can be pure float64 rounding of F (~1e-16), either sign.
  assert -1e-12 <= quiet["excess"] < best["cubic_newton"]["median_excess"] / 10
  for key in ("cpu", "jax", "command"):
    assert key in payload["machine"]
  assert "machine:" in md and "NON-private" in md and "## Reading" in md
  assert "| cubic Newton | T = " in md and "| DP-GD (projected) |" in md


def test_seeds_flag_is_validated(tmp_path):
  bench = load_benchmark("cubic_newton")
  with pytest.raises(SystemExit):
    bench.main(["--quick", "--seeds", "0", "--out-dir", str(tmp_path)])
