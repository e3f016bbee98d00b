"""The README's Results section is exactly what the committed benchmark results generate."""

from __future__ import annotations


import pytest

from conftest import load_benchmark



@pytest.fixture(scope="module")
def rr():
  return load_benchmark("readme_results")


def test_readme_matches_committed_results(rr):
  assert rr.main(["--check"]) == 0, "run: python benchmarks/readme_results.py"


def test_every_result_file_is_used(rr):
  text = (rr.REPO / "README.md").read_text()
  for name in ("privacy_utility", "speed", "convergence", "online_to_batch_rates",
               "online_to_batch_speed"):
    assert (rr.RESULTS / f"{name}.json").exists(), name
  assert "### Privacy–utility" in text and "### Speed against the hardware limit" in text
  assert "benchmarks/results/privacy_utility.png" in text
  assert "### DP online-to-batch: one private pass" in text


def test_render_needs_markers(rr):
  with pytest.raises(ValueError, match="markers"):
    rr.render("# no markers here\n")
