"""benchmarks/online_to_batch.py --speed / --rates --quick: runs, and writes its documented results."""

from __future__ import annotations

import json
import math

import numpy as np
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


def test_needs_one_mode_flag(ob, tmp_path, capsys):
  for argv in ([], ["--speed", "--rates"]):
    with pytest.raises(SystemExit):
      ob.main(argv + ["--out-dir", str(tmp_path)])
    assert "exactly one of --speed or --rates" in capsys.readouterr().err


def test_rates_quick_writes_table_plot_and_criteria(ob, tmp_path):
  assert ob.main(["--rates", "--quick", "--out-dir", str(tmp_path)]) == 0
  payload = json.loads((tmp_path / f"{ob.RATES_STEM}.json").read_text())
  assert (tmp_path / f"{ob.RATES_STEM}.png").stat().st_size > 10_000
  recs = payload["records"]
  # 2 n x (otb: 2 eps) + 2 n x (dp-sgd: 2 eps x the step multipliers)
  rates = load_benchmark("_rates")
  assert len(recs) == 2 * 2 + 2 * 2 * len(rates.LR_MULTIPLIERS)
  for r in recs:
    # -1e-12: least squares is a sum of squares (exactly >= 0); logistic is a float64 mean
    # of KL terms, each >= 0 up to ~1e-16 rounding.
    assert len(r["excess"]) == 2 and all(np.isfinite(r["excess"])) and min(r["excess"]) >= -1e-12
    assert r["delta"] == pytest.approx(r["n"] ** -1.1)
  crit = {c["criterion"].split(":")[0].split(" in ")[0]: c for c in payload["summary"]["criteria"]}
  assert set(crit) == {"slope at eps=8", "eps=0.5"}
  curve = next(c for c in payload["summary"]["curves"]
               if c["method"] == "otb" and c["epsilon"] == 8.0)
  assert crit["slope at eps=8"]["value"] == pytest.approx(
      math.log(curve["means"][1] / curve["means"][0]) / math.log(10.0))
  md = (tmp_path / f"{ob.RATES_STEM}.md").read_text()
  assert "## Criteria" in md and "machine:" in md and "| otb |" in md


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
