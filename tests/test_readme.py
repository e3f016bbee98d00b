"""Every code block of README.md and of every docs/*.md runs.

* ``python`` blocks run one by one, each in a fresh namespace (a newcomer
  copies one block, so each must stand alone), in a temporary working folder.
* ``bash`` blocks are split into commands (``&&``, lines, ``\\`` continuations,
  ``#`` comments). Each command is one of:

  - ``pip install -e ".[EXTRAS]"``: every extra exists in pyproject.toml (the
    suite runs in the environment that command built);
  - ``python -m pytest [--full] [PATHS]``: this suite (``--full``: with its
    full-strength tier); ``.ci/run`` must run the README's test command exactly,
    and every path must exist;
  - ``python -m dpjax ...``: run in a temporary folder (``../shared/data`` read
    as the shared data folder), and must exit 0 and print its result (a command
    that reads a shared LIBSVM file is skipped when the file is absent);
  - ``python benchmarks/SCRIPT.py FLAGS``: the script's own parser accepts the
    flags. These runs take minutes to hours; their ``--quick`` runs are tested
    in ``tests/test_benchmark_*.py``.

  Any other command fails the test, so a new kind of block needs a rule here.
  Commands are written for the repository root, whichever file holds them.
* A fence without one of these two languages fails too.
* Every relative link of these files points at a file that exists (and, with a
  ``#fragment`` into a Markdown file, at one of its headings), and
  ``docs/index.md`` links every page of ``docs/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys
from typing import NamedTuple

import pytest

try:
  import tomllib
except ImportError:  # Python 3.10
  tomllib = pytest.importorskip("tomli")

from conftest import DATA_DIR, REPO_ROOT, check_demo_output

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
FILES = [README, *sorted(DOCS.glob("*.md"))]
_FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.M | re.S)


class Block(NamedTuple):
  """One fenced block: its file, language, first line of code, last heading above it, code."""
  path: pathlib.Path
  lang: str
  line: int
  section: str
  code: str


def _blocks(path: pathlib.Path) -> list[Block]:
  """Every fenced block of ``path``, in order."""
  text = path.read_text(encoding="utf-8")
  out = []
  for m in _FENCE.finditer(text):
    line = text.count("\n", 0, m.start()) + 2  # the first line of code
    heads = re.findall(r"^#{1,3} (.+)$", text[:m.start()], re.M)
    out.append(Block(path, m.group(1), line, heads[-1] if heads else "", m.group(2)))
  return out


def _block_id(block: Block) -> str:
  name = block.path.relative_to(REPO_ROOT).as_posix().replace("/", "-")
  section = re.sub(r"[^a-z0-9]+", "-", block.section.lower()).strip("-")[:40]
  return f"{name}-{block.lang}-L{block.line}-{section}"


BLOCKS = [b for path in FILES for b in _blocks(path)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
BASH = [b for b in BLOCKS if b.lang == "bash"]


def _commands(code: str) -> list[list[str]]:
  joined = code.replace("\\\n", " ")
  commands = []
  for line in joined.splitlines():
    words = shlex.split(line, comments=True)
    while words:
      cut = words.index("&&") if "&&" in words else len(words)
      commands.append(words[:cut])
      words = words[cut + 1:]
  return [c for c in commands if c]


def test_every_block_is_python_or_bash():
  assert len(PYTHON) >= 12 and len(BASH) >= 6  # over README.md and docs/*.md together
  readme = [b for b in BLOCKS if b.path == README]
  assert sum(b.lang == "python" for b in readme) >= 2 and sum(b.lang == "bash" for b in readme) >= 2
  assert len({_block_id(b) for b in BLOCKS}) == len(BLOCKS)
  assert [b for b in BLOCKS if b.lang not in ("python", "bash")] == []


def test_docs_index_links_every_page():
  assert (DOCS / "index.md").exists()
  linked = {m.group(1) for m in re.finditer(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)",
                                            (DOCS / "index.md").read_text(encoding="utf-8"))}
  pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
  assert pages <= linked, f"docs/index.md does not link {sorted(pages - linked)}"
  readme_links = set(re.findall(r"\]\((docs/[^)#\s]+)", README.read_text(encoding="utf-8")))
  assert {f"docs/{p}" for p in pages} <= readme_links, "README.md links every page of docs/"


def _anchors(path: pathlib.Path) -> set[str]:
  """GitHub's anchors of the headings of a Markdown file (code blocks excluded)."""
  text = _FENCE.sub("", path.read_text(encoding="utf-8"))
  anchors = set()
  for head in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
    slug = re.sub(r"[^\w\- ]", "", head.strip().lower()).replace(" ", "-")
    anchors.add(slug)
  return anchors


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(REPO_ROOT).as_posix() for p in FILES])
def test_relative_links_resolve(path):
  text = _FENCE.sub("", path.read_text(encoding="utf-8"))
  bad = []
  for target in re.findall(r"\]\(([^)\s]+)\)", text):
    if re.match(r"[a-z]+:", target):
      continue  # https://, mailto:
    file, _, fragment = target.partition("#")
    resolved = (path.parent / file).resolve() if file else path
    if not resolved.exists():
      bad.append(target)
    elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
      bad.append(target)
  assert not bad, f"{path.name}: broken links {bad}"


def test_quick_start_is_two_commands_and_ci_runs_the_second():
  quick = [b for b in BASH if b.path == README and b.section == "Quick start"]
  assert len(quick) == 2
  demo, tests = (_commands(b.code) for b in quick)
  assert demo == [["pip", "install", "-e", ".[dev]"], ["python", "-m", "dpjax", "demo"]]
  assert tests == [["pip", "install", "-e", ".[dev]"], ["python", "-m", "pytest"]]
  ci = (REPO_ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
  assert ci == quick[1].code.strip()


@pytest.mark.parametrize("block", PYTHON, ids=[_block_id(b) for b in PYTHON])
def test_python_block_runs(block, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  # Pad so that a traceback names the file's own line numbers.
  exec(compile("\n" * (block.line - 1) + block.code, str(block.path), "exec"),
       {"__name__": "__readme__"})
  assert capsys.readouterr().out.strip(), "every example prints what it computed"


class _Parsed(Exception):
  """Raised by the patched ``parse_args`` once a script's flags are accepted."""


def _check_benchmark_flags(script: pathlib.Path, flags: list[str], monkeypatch) -> None:
  spec = importlib.util.spec_from_file_location(f"_readme_{script.stem}", script)
  module = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
  monkeypatch.syspath_prepend(str(script.parent))
  spec.loader.exec_module(module)
  original = argparse.ArgumentParser.parse_args

  def parse_then_stop(self, args=None, namespace=None):
    original(self, args, namespace)  # exits with status 2 on a flag it does not know
    raise _Parsed

  monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
  with pytest.raises(_Parsed):
    module.main(flags)


def _is_full_demo(block: Block) -> bool:
  """The README's demo command: the whole default demo (about a minute of compilation).

  It runs with ``--full``; the default run checks its commands
  (:func:`test_quick_start_is_two_commands_and_ci_runs_the_second`) and runs a
  small demo through the same code (``tests/test_cli.py``).
  """
  return block.path == README and ["python", "-m", "dpjax", "demo"] in _commands(block.code)


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.full) if _is_full_demo(b)
                                   else b for b in BASH], ids=[_block_id(b) for b in BASH])
def test_bash_block_runs(block, tmp_path, monkeypatch):
  extras = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
      "optional-dependencies"])
  skipped = []
  for cmd in _commands(block.code):
    if cmd[:3] == ["pip", "install", "-e"]:
      m = re.fullmatch(r"\.\[([a-z,]+)\]", cmd[3])
      assert m and len(cmd) == 4, cmd
      assert set(m.group(1).split(",")) <= extras, cmd
    elif cmd[:3] == ["python", "-m", "pytest"]:
      for arg in cmd[3:]:  # the suite's own flag, or paths that exist
        assert arg == "--full" or (not arg.startswith("-") and (REPO_ROOT / arg).exists()), cmd
    elif cmd[:3] == ["python", "-m", "dpjax"]:
      args = [a.replace("../shared/data", str(DATA_DIR)) for a in cmd[3:]]
      missing = [a for a in args if a.startswith(str(DATA_DIR)) and not os.path.exists(a)]
      if missing:
        skipped.append(f"{missing[0]} is absent")
        continue
      env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get(
          "PYTHONPATH", "")]))
      proc = subprocess.run([sys.executable, "-m", "dpjax", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600, env=env)
      assert proc.returncode == 0, f"{shlex.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
      assert proc.stdout.strip()
      if args == ["demo"]:  # the newcomer's first command: check what it reports
        check_demo_output(proc.stdout, proc.stderr, seed=0, n=10_000, d=100,
                          epsilons=(0.1, 1.0, 10.0))
      for out in ("--json", "--plot"):
        if out in args:
          assert (tmp_path / args[args.index(out) + 1]).stat().st_size > 0, cmd
    elif cmd[0] == "python" and cmd[1].startswith("benchmarks/") and cmd[1].endswith(".py"):
      _check_benchmark_flags(REPO_ROOT / cmd[1], cmd[2:], monkeypatch)
    else:
      pytest.fail(f"no rule runs the command {shlex.join(cmd)!r} of {block.path.name}: "
                  "add one to this test")
  if skipped:
    pytest.skip("; ".join(skipped))
