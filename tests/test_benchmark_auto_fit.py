"""benchmarks/auto_fit.py: the auto rule's refit from recorded frontier runs (no optimizer runs)."""

from __future__ import annotations

import json
import math

import pytest

from conftest import load_benchmark
from dpjax.training import auto


@pytest.fixture(scope="module")
def af():
  return load_benchmark("auto_fit")


N, RHO = 10_000, 1.0  # n sqrt(rho) = 1e4 for both datasets; d* = 8.3e4.


def _dataset(name: str, d: int, means: dict[int, float], best: float) -> tuple[dict, dict]:
  """A per-dataset payload at eps = 1 with precond-gd means over m (kappa 6, eta 1)."""
  cands = [{"steps": m, "options": {"kappa": 6.0, "learning_rate": 1.0, "curvature_frac": 0.03},
            "average": "last-half", "results": {"1": {"mean": v}}} for m, v in means.items()]
  cands.append({"steps": 40, "options": {"kappa": 6.0, "learning_rate": 1.0,
                                         "curvature_frac": 0.03},
                "average": "none", "results": {"1": {"mean": 0.0}}})  # not last-half: ignored.
  payload = {"dataset": name, "n": N, "d": d, "delta": 1e-8, "accounting": "gaussian",
             "epsilons": [1.0], "families": {
                 "precond-gd": {"candidates": cands},
                 "dp-gd+avg": {"candidates": [{"steps": 100, "options": {"learning_rate": 4.0},
                                               "average": "last-half",
                                               "results": {"1": {"mean": 9.0}}}]},
                 "auto": {"choice": {"1": {"rho": RHO}}}}}
  row = {"dataset": name, "epsilon": 1.0, "best_tuned_mean": best}
  return payload, row


def _frontier() -> dict:
  # "wide" (d = 400) is best at m = 80; "narrow" (d = 4) at m = 10: same n sqrt(rho).
  wide, r1 = _dataset("wide", 400, {10: 4.0, 20: 3.0, 40: 2.0, 80: 1.0}, 1.0)
  narrow, r2 = _dataset("narrow", 4, {10: 1.0, 20: 1.1, 40: 2.0, 80: 4.0}, 1.0)
  return {"datasets": [wide, narrow], "acceptance": {"rows": [r1, r2]}}


def test_cells_and_score(af):
  cells = af.cells_from(_frontier())
  assert [c["dataset"] for c in cells] == ["wide", "narrow"]
  assert cells[0]["precond"] == {
      **{(6.0, 1.0, "last-half", m): v for m, v in {10: 4.0, 20: 3.0, 40: 2.0, 80: 1.0}.items()},
      (6.0, 1.0, "none", 40): 0.0}
  assert cells[0]["gd"] == {100: 9.0} and cells[0]["rho"] == RHO
  # log10(n sqrt(rho)) = 4, log10(d) = 2.602 / 0.602: k = round(-2 + 0.5 * 4 + c log10 d).
  assert af.rule_steps(cells[0], -2.0, 0.5, 1.0) == 10 * 2**3
  assert af.rule_steps(cells[1], -2.0, 0.5, 1.0) == 10 * 2**1
  assert af.score(cells, 6.0, 1.0, -2.0, 0.5, 1.0) == [1.0, 1.1]
  assert af.score(cells, 6.0, 1.0, 0.0, 0.0, 0.0) == [4.0, 1.0]  # m = 10 for both.
  assert af.score(cells, 6.0, 1.0, 8.0, 0.0, 0.0) is None  # m = 2560: not in the grid.


def test_fit_and_conflicts(af):
  cells = af.cells_from(_frontier())
  res = af.fit(cells, 1.25)
  # Only d separates the two cells, and "wide" needs more steps: c > 0 gives
  # both their best m (80 and 10; c = 1.5 spans the 3 doublings).
  assert res["best"][0]["worst"] == pytest.approx(1.0)
  assert res["best"][0]["c"] > 0
  assert res["rules_meeting_target"] > 0
  assert res["admissible"] == {"wide eps=1": [80], "narrow eps=1": [10, 20]}
  (pair,) = res["conflicts"]["kappa=6, eta=1"]
  assert pair["needs_more_steps"] == "wide eps=1" and pair["c_sign_needed"] == "+"
  a, b, c = auto._PRECOND_RULE  # pylint: disable=protected-access
  assert res["current"]["a"] == a and res["current"]["c"] == c
  # Swap the needs: the wide cell now wants few steps, so c must be negative.
  fr = _frontier()
  for cand in fr["datasets"][0]["families"]["precond-gd"]["candidates"]:
    if cand["average"] == "last-half":
      cand["results"]["1"]["mean"] = {10: 1.0, 20: 1.1, 40: 2.0, 80: 4.0}[cand["steps"]]
  for cand in fr["datasets"][1]["families"]["precond-gd"]["candidates"]:
    if cand["average"] == "last-half":
      cand["results"]["1"]["mean"] = {10: 4.0, 20: 3.0, 40: 2.0, 80: 1.0}[cand["steps"]]
  res = af.fit(af.cells_from(fr), 1.25)
  assert res["best"][0]["c"] < 0
  assert res["conflicts"]["kappa=6, eta=1"][0]["c_sign_needed"] == "-"


def test_main_writes_results(af, tmp_path, capsys):
  src = tmp_path / "frontier.json"
  src.write_text(json.dumps(_frontier()))
  out = tmp_path / "out"
  assert af.main(["--frontier", str(src), "--out-dir", str(out)]) == 0
  result = json.loads((out / "auto_fit.json").read_text())
  assert result["rules_scored"] > 0 and math.isclose(result["target"], 1.25)
  md = (out / "auto_fit.md").read_text()
  assert "Conflicting pairs" in md and "wide eps=1" in md
  assert "wide eps=1" in capsys.readouterr().out


def test_main_missing_file_exits_2(af, tmp_path, capsys):
  assert af.main(["--frontier", str(tmp_path / "none.json"), "--out-dir", str(tmp_path)]) == 2
  assert "--frontier" in capsys.readouterr().err
