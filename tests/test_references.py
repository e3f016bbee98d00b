"""The project cites only what a reader can open: papers, and files inside the repository.

Docstrings, comments, printed strings and the documentation must not point at
the maintainers' private design notes (their file names, their section
numbers such as "spec" followed by a section number, the folder they live in)
nor at issue numbers of
the project's tracker: a user cannot open either. Papers are cited by authors,
year, venue or arXiv id and section; a measurement is stated, or points at a
file of the repository (e.g. ``benchmarks/results/...``).

Walked: every text file under ``dpjax/``, the ``*.py`` files under
``benchmarks/`` and ``tests/``, ``README.md``, and every text file under
``docs/`` when that folder exists. Nothing is skipped; each offence is
reported as ``path:line: text``. Not offences: the data folder
``../shared/data`` (a path, not a citation), "issues" in prose without a
number, GitHub URLs (``github.com/<owner>/<repo>/issues/<n>`` of other
projects), hex colours such as ``"#1f77b4"``.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Suffixes read as text under dpjax/ and docs/.
TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".ipynb"}

# Each entry: (what it is, regex). Matched case-insensitively, one line at a time.
FORBIDDEN = (
    # File names of the private design folder, with or without a path.
    ("private design file", r"\b(?:spec|research)-[a-z0-9]+(?:-[a-z0-9]+)*\.md\b"),
    ("private design file", r"\b(?:ecosystem|design)\.md\b"),
    ("private design file", r"\breference[-_]measurements\b"),
    # The private folders themselves (the data folder ../shared/data is allowed).
    ("private folder", r"\bshared/(?:docs|papers)\b"),
    # Section pointers into the private specs: "spec", then an optional "section(s)", then a number.
    ("private spec section", r"\bspec,? (?:sections? |§ ?)?\d"),
    ("private note", r"\bresearch[ -]notes?\b"),
    ("private spec pitfall", r"\bpitfall P\d+\b"),
    # Issue numbers: "issue", "issues" or a bare hash, then a number (examples: _CAUGHT below).
    ("issue number", r"\bissues? ?#?\d+"),
    ("issue number", r"(?<![\w\"'&/#])#\d+\b(?![\w-])"),
)
_COMPILED = tuple((what, re.compile(rx, re.IGNORECASE)) for what, rx in FORBIDDEN)


def offences_in_text(text: str) -> list[tuple[int, str, str]]:
  """``(line number, kind, matched text)`` of every forbidden citation in ``text``."""
  found = []
  for number, line in enumerate(text.splitlines(), start=1):
    for what, rx in _COMPILED:
      for m in rx.finditer(line):
        found.append((number, what, m.group(0)))
  return found


def _walk() -> list[pathlib.Path]:
  files: list[pathlib.Path] = []
  files += [p for p in (ROOT / "dpjax").rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
  files += list((ROOT / "benchmarks").rglob("*.py"))
  files += list((ROOT / "tests").rglob("*.py"))
  files.append(ROOT / "README.md")
  docs = ROOT / "docs"
  if docs.is_dir():
    files += [p for p in docs.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
  return sorted(p for p in set(files) if "__pycache__" not in p.parts)


FILES = _walk()


def test_the_walk_finds_the_project():
  names = {p.relative_to(ROOT).as_posix() for p in FILES}
  assert "README.md" in names and (ROOT / "README.md").is_file()
  assert "dpjax/__init__.py" in names and "tests/test_references.py" in names
  assert any(n.startswith("benchmarks/") for n in names)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_private_or_issue_citations(path):
  rel = path.relative_to(ROOT).as_posix()
  text = path.read_text(encoding="utf-8", errors="replace")
  lines = text.splitlines()
  found = offences_in_text(text)
  assert not found, "citations a user cannot open (cite a paper, or state the fact):\n" + "\n".join(
      f"{rel}:{n}: [{what}] {hit!r} in: {lines[n - 1].strip()[:160]}" for n, what, hit in found)


# The pattern itself: what it must catch and what it must leave alone. The
# strings are assembled from parts so that this file passes its own check.
_MD = ".md"
_CAUGHT = [
    "see ``spec-newton" + _MD + "`` section 4.6",
    "(spec-online-to-batch" + _MD + " pitfall" + " P3)",
    "research-preconditioning" + _MD + " section 6",
    "ecosystem" + _MD + " 3.3",
    "design" + _MD,
    "reference" + "-measurements 4.1",
    "../shared/" + "docs/x",
    "shared/" + "papers/ganesh.txt",
    "Spec" + " 4.3 step 1",
    "spec" + " section 1: the loss",
    "Spec" + " sections 1 and 8",
    "as in the research" + " note's tuned runs",
    "pitfall" + " P2",
    "(issue" + " 5)",
    "Issue" + " 9 acceptance",
    "issue" + " #" + "12",
    "fixed in " + "#" + "12.",
    "(" + "#" + "14)",
]
_LEFT_ALONE = [
    "the data lives in ../shared/data (or $DPJAX_DATA_DIR)",
    "Issues :class:`dpjax.PrivacyLeakWarning` when asked to.",
    "the warning is issued below; known issues with float noise",
    "https://github.com/google/jax/issues/12345",
    "color='#1f77b4', also \"#123456\"",
    "x = 1  # a comment",
    "Ganesh et al. (NeurIPS 2023, arXiv:2305.13209), Sec. 5.2",
    "inspect.signature; a specification of 3 fields",
]


@pytest.mark.parametrize("line", _CAUGHT)
def test_pattern_catches(line):
  assert offences_in_text(line), line


@pytest.mark.parametrize("line", _LEFT_ALONE)
def test_pattern_leaves_alone(line):
  assert not offences_in_text(line), (line, offences_in_text(line))
