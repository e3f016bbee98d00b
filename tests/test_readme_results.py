"""docs/results.md's Results section and README.md's results headline are exactly
what the committed benchmark results generate."""

from __future__ import annotations

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def rr():
  return load_benchmark("readme_results")


def test_results_and_headline_match_committed_results(rr):
  assert rr.main(["--check"]) == 0, "run: python benchmarks/readme_results.py"


def test_every_result_file_is_used(rr):
  text = rr.RESULTS_DOC.read_text()
  for name in ("privacy_utility", "speed", "convergence", "online_to_batch_rates",
               "online_to_batch_speed"):
    assert (rr.RESULTS / f"{name}.json").exists(), name
  assert "## Privacy–utility" in text and "## Speed against the hardware limit" in text
  # docs/results.md links the results folder from docs/.
  assert "](../benchmarks/results/privacy_utility.png)" in text
  assert "](benchmarks/results/" not in text
  assert "## DP online-to-batch: one private pass" in text


def test_readme_headline_links_the_results(rr):
  text = rr.README.read_text()
  head = text[text.index(rr.HEADLINE_BEGIN):text.index(rr.HEADLINE_END)]
  assert "](docs/results.md)" in head
  assert rr.BEGIN not in text  # the full section lives in docs/results.md only


def test_render_needs_markers(rr):
  with pytest.raises(ValueError, match="markers"):
    rr.render("# no markers here\n")
  with pytest.raises(ValueError, match="markers"):
    rr.render_headline("# no markers here\n")
