"""Shared helper of the notebook tests (tests/test_notebook_*.py): execute colab/<name>.ipynb headlessly.

One test file per notebook, so that ``pytest -n auto --dist loadfile`` runs them on different workers.
The executed copy lives in memory only; the committed file is never rewritten (``python colab/execute.py``
refreshes the committed outputs).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import sys
import tempfile
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
COLAB_DIR = REPO_ROOT / "colab"
REPO_SLUG = "dpjax/dpjax"  # keep in sync with the badge and the install cell of every notebook
INSTALL_TAG = "install"
MAX_SECONDS = 180.0  # wall time of one whole notebook
CELL_TIMEOUT = 170  # seconds per cell


def _require():
  nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[notebooks]')")
  nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[notebooks]')")
  pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install -e '.[notebooks]')")
  return nbformat, nbclient


def load(name: str):
  nbformat, _ = _require()
  return nbformat.read(COLAB_DIR / name, as_version=4)


def _is_install(cell) -> bool:
  return cell.cell_type == "code" and INSTALL_TAG in cell.get("metadata", {}).get("tags", [])


def check_committed(name: str) -> None:
  """The committed notebook: badge, tagged install cell first, outputs everywhere, at least one PNG."""
  nb = load(name)
  md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
  url = f"https://colab.research.google.com/github/{REPO_SLUG}/blob/main/colab/{name}"
  assert url in md, f"{name}: no 'Open in Colab' badge linking {url}"
  assert "colab-badge.svg" in md, f"{name}: the Colab link is not a badge"
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code, f"{name} has no code cells"
  first = code[0]
  assert _is_install(first), f"{name}: the first code cell must carry the tag {INSTALL_TAG!r}"
  assert "pip install" in first.source and REPO_SLUG in first.source, (
      f"{name}: the install cell must pip-install dpjax from github.com/{REPO_SLUG}")
  assert not any(_is_install(c) for c in code[1:]), f"{name}: only the first code cell may be 'install'"
  missing = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and not _is_install(c) and not c.get("outputs")]
  assert not missing, (f"{name}: code cells {missing} have no committed outputs; run "
                       "`python colab/execute.py` and commit the result")
  errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]
  assert not errors, f"{name}: committed outputs of cells {errors} are errors"
  pngs = [o for c in code for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
  assert pngs, f"{name}: no embedded image/png output (plots must be committed inline)"


def kernel_env() -> dict:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
  env["MPLBACKEND"] = "Agg"
  return env


def kernel_manager(tmp: str):
  """A kernel manager whose "python3" kernelspec runs this interpreter (written into ``tmp``).

  Whatever "python3" kernelspec the machine has installed (another virtualenv's, say) is not used.
  """
  from ipykernel.kernelspec import install  # pylint: disable=g-import-not-at-top
  from jupyter_client.kernelspec import KernelSpecManager  # pylint: disable=g-import-not-at-top
  from jupyter_client.manager import KernelManager  # pylint: disable=g-import-not-at-top
  spec_dir = install(prefix=tmp, kernel_name="python3")  # argv[0] = sys.executable
  ksm = KernelSpecManager(kernel_dirs=[os.path.dirname(spec_dir)])
  return KernelManager(kernel_name="python3", kernel_spec_manager=ksm)


def execute(name: str) -> float:
  """Runs the notebook (install cell skipped) in colab/; returns its wall time in seconds.

  A failing cell raises nbclient's ``CellExecutionError`` with that cell's traceback. A last cell is
  appended to the in-memory copy to check that the kernel runs this interpreter and imports this
  checkout's dpjax.
  """
  nbformat, nbclient = _require()
  nb = copy.deepcopy(load(name))
  nb.cells = [c for c in nb.cells if not _is_install(c)]
  nb.cells.append(nbformat.v4.new_code_cell(
      "import sys, json, dpjax\nprint(json.dumps({'exe': sys.executable, 'dpjax': dpjax.__file__}))"))
  with tempfile.TemporaryDirectory() as tmp:
    km = kernel_manager(tmp)
    client = nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(COLAB_DIR)}})
    start = time.perf_counter()
    try:
      client.execute(env=kernel_env())
    finally:
      # nbclient leaves a kernel it was handed running: without this the kernel (a JAX
      # process) lives, and takes CPU, until the test worker exits.
      if km.has_kernel:
        km.shutdown_kernel(now=True)
    seconds = time.perf_counter() - start
  probe = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout"))
  assert os.path.realpath(probe["exe"]) == os.path.realpath(sys.executable), (
      f"the kernel ran {probe['exe']}, not this interpreter {sys.executable}")
  assert pathlib.Path(probe["dpjax"]).resolve().is_relative_to(REPO_ROOT), (
      f"the kernel imported dpjax from {probe['dpjax']}, not from this checkout")
  assert seconds < MAX_SECONDS, f"{name} took {seconds:.0f} s (limit {MAX_SECONDS:.0f} s)"
  print(f"{name}: {seconds:.1f} s")
  return seconds


def reference_problems(nb) -> list[str]:
  """What a notebook's code cells use of dpjax that does not exist: a module, an attribute
  (``dpjax.fit``, ``accounting.zcdp_to_epsilon`` after ``from dpjax import accounting``) or a
  keyword argument that the called function does not accept.

  A static check (the cells are parsed, not run) for the default test run; the full-strength
  run (``python -m pytest --full``) executes the notebooks.
  """
  import ast  # pylint: disable=g-import-not-at-top
  import importlib  # pylint: disable=g-import-not-at-top
  import inspect  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top

  problems: list[str] = []
  aliases: dict = {}

  def attribute(obj, name):
    if hasattr(obj, name):
      return getattr(obj, name)
    if isinstance(obj, types.ModuleType):
      return importlib.import_module(f"{obj.__name__}.{name}")  # a submodule not imported yet
    raise AttributeError(name)

  def chain(node):
    """``(root name, [attributes])`` of a pure ``a.b.c`` expression, else None."""
    attrs = []
    while isinstance(node, ast.Attribute):
      attrs.append(node.attr)
      node = node.value
    return (node.id, attrs[::-1]) if isinstance(node, ast.Name) else None

  def resolve(node, where):
    parts = chain(node)
    if parts is None or parts[0] not in aliases:
      return None
    obj, path = aliases[parts[0]], parts[0]
    for name in parts[1]:
      if not isinstance(obj, (types.ModuleType, type)):
        return None  # an attribute of a value: not checked
      path += f".{name}"
      try:
        obj = attribute(obj, name)
      except (AttributeError, ImportError):
        problems.append(f"{where}: {path} does not exist")
        return None
    return obj

  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # old paths still resolve
    for i, cell in enumerate(nb.cells):
      if cell.cell_type != "code" or _is_install(cell):
        continue
      where = f"cell {i}"
      source = "\n".join(line for line in cell.source.splitlines()
                         if not line.lstrip().startswith(("%", "!")))
      tree = ast.parse(source)
      for node in ast.walk(tree):
        if isinstance(node, ast.Import):
          for a in node.names:
            if a.name.split(".")[0] == "dpjax":
              try:
                module = importlib.import_module(a.name)
              except ImportError:
                problems.append(f"{where}: import {a.name} fails")
                continue
              aliases[a.asname or "dpjax"] = module if a.asname else importlib.import_module("dpjax")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dpjax":
          try:
            module = importlib.import_module(node.module)
          except ImportError:
            problems.append(f"{where}: from {node.module} import fails")
            continue
          for a in node.names:
            try:
              aliases[a.asname or a.name] = attribute(module, a.name)
            except (AttributeError, ImportError):
              problems.append(f"{where}: from {node.module} import {a.name}: no such name")
      for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
          resolve(node, where)
        elif isinstance(node, ast.Call):
          func = resolve(node.func, where) if isinstance(node.func, ast.Attribute) else (
              aliases.get(node.func.id) if isinstance(node.func, ast.Name) else None)
          if func is None or not callable(func):
            continue
          try:
            params = inspect.signature(func).parameters
          except (TypeError, ValueError):
            continue
          if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
          for kw in node.keywords:
            if kw.arg is not None and kw.arg not in params:
              problems.append(f"{where}: {ast.unparse(node.func)}() takes no keyword {kw.arg!r}")
  return list(dict.fromkeys(problems))  # a name both called and looked up is reported once


def check_references(name: str) -> None:
  """The default run's check of a notebook: :func:`reference_problems` finds nothing."""
  problems = reference_problems(load(name))
  assert not problems, f"{name}: " + "; ".join(problems)
