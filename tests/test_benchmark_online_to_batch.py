"""benchmarks/online_to_batch.py --speed / --rates: runs, and writes its documented results.

The default run runs ``--quick --smoke`` (the fewest compiled programs that produce every output);
the ``--quick`` runs, with their scale-specific checks, are in the full tier (``pytest --full``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import check_smoke_needs_quick, load_benchmark

_FUSED_EXACT = "online_to_batch (fused GLM, buffered tree)"


@pytest.fixture(scope="module")
def ob():
  return load_benchmark("online_to_batch")


def _check_speed_rows(payload):
  """What holds of --speed's rows at any size."""
  names = [r["variant"] for r in payload["rows"]]
  assert names[0].startswith("non-private")
  assert payload["rows"][0]["ratio_in_scan"] == pytest.approx(1.0)
  for r in payload["rows"]:
    assert r["per_call_ms"] > 0 and r["in_scan_ms"] > 0 and r["compile_seconds"] > 0
    assert r["ratio_in_scan"] == pytest.approx(r["in_scan_ms"] / payload["rows"][0]["in_scan_ms"])
    assert r["ratio_per_call"] == pytest.approx(r["per_call_ms"] / payload["rows"][0]["per_call_ms"])
    assert r["reps_per_call"] == payload["reps"] and r["reps_scan"] == max(3, payload["reps"] // 10)
  return names


def test_speed_smoke_writes_results(ob, tmp_path):
  assert ob.main(["--speed", "--quick", "--smoke", "--out-dir", str(tmp_path), "--reps", "3"]) == 0
  payload = json.loads((tmp_path / f"{ob.STEM}.json").read_text())
  assert payload["quick"] is True and payload["smoke"] is True
  assert payload["dim"] == ob.DIM and payload["batch"] == ob.BATCH and payload["scan_steps"] == 8
  assert payload["criterion"] == ob.SPEED_CRITERION and "cpu" in payload["machine"]
  names = _check_speed_rows(payload)
  assert len(names) == ob.SMOKE_VARIANTS and names[1] == _FUSED_EXACT
  md = (tmp_path / f"{ob.STEM}.md").read_text()
  assert "criterion" in md and "machine:" in md and f"| {_FUSED_EXACT} |" in md
  fused = payload["rows"][1]["ratio_in_scan"]
  verdict = "yes" if fused <= ob.SPEED_CRITERION else "no"
  assert f"in a scan: **{verdict}** (worst {fused:.2f}×)" in md


@pytest.mark.full
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


def test_needs_one_mode_flag(ob, tmp_path, capsys):
  for argv in ([], ["--speed", "--rates"]):
    with pytest.raises(SystemExit):
      ob.main(argv + ["--out-dir", str(tmp_path)])
    assert "exactly one of --speed or --rates" in capsys.readouterr().err


def test_smoke_needs_quick(ob, tmp_path, capsys):
  for mode in ("--speed", "--rates"):
    check_smoke_needs_quick(ob.main, tmp_path, capsys, mode)


def _check_rates_outputs(ob, tmp_path, payload):
  """What holds of --rates' outputs at any grid with both criteria's epsilons and 2 n a decade apart."""
  assert (tmp_path / f"{ob.RATES_STEM}.png").stat().st_size > 10_000
  for r in payload["records"]:
    # -1e-12: least squares is a sum of squares (exactly >= 0); logistic is a float64 mean
    # of KL terms, each >= 0 up to ~1e-16 rounding.
    assert len(r["excess"]) == payload["grid"]["seeds"]
    assert all(np.isfinite(r["excess"])) and min(r["excess"]) >= -1e-12
    assert r["mean"] == pytest.approx(np.mean(r["excess"]))
    assert r["delta"] == pytest.approx(r["n"] ** -1.1) and r["steps"] == r["n"] // r["batch"]
  crit = {c["criterion"].split(":")[0].split(" in ")[0]: c for c in payload["summary"]["criteria"]}
  assert set(crit) == {"slope at eps=8", "eps=0.5"}
  curve = next(c for c in payload["summary"]["curves"]
               if c["method"] == "otb" and c["epsilon"] == 8.0)
  assert crit["slope at eps=8"]["value"] == pytest.approx(
      math.log(curve["means"][1] / curve["means"][0]) / math.log(10.0))
  fast = next(c for c in payload["summary"]["curves"]
              if c["method"] == "otb" and c["epsilon"] == 0.5)
  assert crit["eps=0.5"]["value"] == pytest.approx(fast["means"][0] / fast["means"][1])
  assert crit["eps=0.5"]["met"] == (crit["eps=0.5"]["value"] >= 10.0)
  md = (tmp_path / f"{ob.RATES_STEM}.md").read_text()
  assert "## Criteria" in md and "machine:" in md and "| otb |" in md


def test_rates_smoke_writes_table_plot_and_criteria(ob, tmp_path):
  assert ob.main(["--rates", "--quick", "--smoke", "--out-dir", str(tmp_path)]) == 0
  payload = json.loads((tmp_path / f"{ob.RATES_STEM}.json").read_text())
  grid = ob.SMOKE_RATES_GRID
  assert payload["quick"] is True and payload["smoke"] is True
  assert payload["grid"] == {k: list(v) if isinstance(v, tuple) else v for k, v in grid.items()}
  recs = payload["records"]
  # otb alone: one record per (n, eps), no step multipliers.
  assert len(recs) == len(grid["ns"]) * len(grid["epsilons"])
  assert {r["method"] for r in recs} == {"otb"} and all(r["lr_multiplier"] is None for r in recs)
  _check_rates_outputs(ob, tmp_path, payload)


@pytest.mark.full
def test_rates_quick_writes_table_plot_and_criteria(ob, tmp_path):
  assert ob.main(["--rates", "--quick", "--out-dir", str(tmp_path)]) == 0
  payload = json.loads((tmp_path / f"{ob.RATES_STEM}.json").read_text())
  recs = payload["records"]
  # 2 n x (otb: 2 eps) + 2 n x (dp-sgd: 2 eps x the step multipliers)
  rates = load_benchmark("_rates")
  assert len(recs) == 2 * 2 + 2 * 2 * len(rates.LR_MULTIPLIERS)
  assert all(len(r["excess"]) == 2 for r in recs)
  _check_rates_outputs(ob, tmp_path, payload)


def test_rates_population_is_as_documented():
  rates = load_benchmark("_rates")
  import jax  # pylint: disable=g-import-not-at-top
  # The benchmark's functions compiled, as its scans run them (one program each, not an eager
  # dispatch per operation).
  x = np.asarray(jax.jit(rates.features, static_argnums=(1, 2))(jax.random.key(0), 4000, 37),
                 np.float64)
  np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-6)  # ||x|| = 1 exactly
  np.testing.assert_allclose(x.T @ x / 4000, np.eye(37) / 37, atol=4.5 * math.sqrt(1 / 4000) / 37)
  assert np.linalg.norm(rates.w_star(10)) == pytest.approx(rates.W_STAR_NORM)
  d = 6
  ws = rates.w_star(d)
  for loss in rates.LOSSES:
    assert rates.excess_population_loss(loss, ws[None], d)[0] == pytest.approx(0.0, abs=1e-15)
    w = ws + 0.3 * np.eye(d)[0]
    # Against a Monte Carlo estimate of E[l(w)] - E[l(w*)] on fresh samples of the stream.
    xb, yb = jax.jit(rates.sampler(loss, d, 200_000))(jax.random.key(3), 0)
    xb, yb = np.asarray(xb, np.float64), np.asarray(yb, np.float64)
    if loss == "least_squares":
      diff = 0.5 * ((xb @ w - yb) ** 2 - (xb @ ws - yb) ** 2)
    else:
      diff = np.logaddexp(0, -yb * (xb @ w)) - np.logaddexp(0, -yb * (xb @ ws))
    exact = rates.excess_population_loss(loss, w[None], d)[0]
    assert abs(diff.mean() - exact) < 4.5 * diff.std() / math.sqrt(diff.size)
    assert exact > 0


def test_slope_and_decade_drop_helpers():
  rates = load_benchmark("_rates")
  ns = [1000, 3000, 10000, 100000]
  assert rates.slope(ns, [5.0 / n**0.5 for n in ns]) == pytest.approx(-0.5)
  drops = rates.decade_drops(ns, [1.0 / n for n in ns])
  assert [n for n, _ in drops] == [1000, 10000] and all(r == pytest.approx(10.0) for _, r in drops)


def test_best_picks_each_cells_best_step_multiplier():
  """The baselines' step is tuned per (loss, d, n, method, eps): the record of least mean excess."""
  rates = load_benchmark("_rates")

  def rec(n, method, eps, mult, mean):
    return {"loss": "least_squares", "d": 5, "n": n, "steps": n // 10, "method": method,
            "epsilon": eps, "lr_multiplier": mult, "mean": mean}

  records = [rec(100, "otb", 8.0, None, 0.5), rec(1000, "otb", 8.0, None, 0.05),
             rec(100, "dp-ftrl", 8.0, 0.25, 0.3), rec(100, "dp-ftrl", 8.0, 4.0, 0.1),
             rec(100, "dp-ftrl", 8.0, 1.0, 0.2), rec(1000, "dp-ftrl", 8.0, 0.25, 0.01),
             rec(1000, "dp-ftrl", 8.0, 4.0, 0.04)]
  chosen = rates.best(records)
  assert chosen[("least_squares", 5, 100, "dp-ftrl", 8.0)]["lr_multiplier"] == 4.0
  assert chosen[("least_squares", 5, 1000, "dp-ftrl", 8.0)]["lr_multiplier"] == 0.25
  assert len(chosen) == 4
  curves = {c["method"]: c for c in rates.summarize(records)["curves"]}
  assert curves["dp-ftrl"]["means"] == [0.1, 0.01] and curves["otb"]["means"] == [0.5, 0.05]
  assert curves["dp-ftrl"]["slope"] == pytest.approx(-1.0)
  (crit,) = rates.summarize(records)["criteria"]  # eps = 8 only: the slope criterion of otb.
  assert crit["value"] == pytest.approx(-1.0) and crit["met"] is False
