"""Executes the notebooks in colab/ in place, so that they are committed with their outputs.

    python colab/execute.py                       # all notebooks
    python colab/execute.py 02_optax_training_loop.ipynb

Cells tagged "install" (the ``%pip install`` cell for Colab) are skipped: the kernel imports the dpjax of
this checkout (its root is put first on PYTHONPATH). The kernel runs this interpreter (through a temporary
kernelspec) with cwd = colab/, MPLBACKEND=Agg and a per-cell timeout. Volatile metadata (execution
timestamps) is not recorded, so that a re-run changes only the outputs (the printed compile and run times
always change). Prints the time each notebook took. Needs nbclient, nbformat and ipykernel (the
``notebooks`` extra).
"""

from __future__ import annotations

import argparse
import copy
import os
import pathlib
import sys
import tempfile
import time

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
INSTALL_TAG = "install"
NOTEBOOKS = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def kernel_env() -> dict:
  """The kernel's environment: this checkout first on PYTHONPATH, a headless matplotlib."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
  env["MPLBACKEND"] = "Agg"
  env.setdefault("PYTHONHASHSEED", "0")
  return env


def kernel_manager(tmp: str):
  """A kernel manager whose "python3" kernelspec (written into ``tmp``) runs this interpreter."""
  from ipykernel.kernelspec import install
  from jupyter_client.kernelspec import KernelSpecManager
  from jupyter_client.manager import KernelManager
  spec_dir = install(prefix=tmp, kernel_name="python3")  # argv[0] = sys.executable
  ksm = KernelSpecManager(kernel_dirs=[os.path.dirname(spec_dir)])
  return KernelManager(kernel_name="python3", kernel_spec_manager=ksm)


def is_install(cell) -> bool:
  return cell.cell_type == "code" and INSTALL_TAG in cell.get("metadata", {}).get("tags", [])


def strip_volatile(nb) -> None:
  """Removes timing metadata so that re-executions differ only in their outputs."""
  nb.metadata.pop("widgets", None)
  for cell in nb.cells:
    cell.metadata.pop("execution", None)
    cell.metadata.pop("ExecuteTime", None)


def execute(nb, *, timeout: int = 300):
  """Runs ``nb`` (modified in place and returned) with its install cells left out, then put back."""
  skipped = {i: c for i, c in enumerate(nb.cells) if is_install(c)}
  run = copy.deepcopy(nb)
  run.cells = [c for i, c in enumerate(nb.cells) if i not in skipped]
  with tempfile.TemporaryDirectory() as tmp:
    client = NotebookClient(run, km=kernel_manager(tmp), timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(HERE)}}, record_timing=False)
    client.execute(env=kernel_env())
  executed = iter(run.cells)
  for i in range(len(nb.cells)):
    if i in skipped:
      nb.cells[i].outputs = []
      nb.cells[i].execution_count = None
    else:
      nb.cells[i] = next(executed)
  strip_volatile(nb)
  return nb


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("notebooks", nargs="*", help="notebook names or paths (default: all in colab/)")
  parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
  args = parser.parse_args(argv)
  paths = [pathlib.Path(p) if pathlib.Path(p).exists() else HERE / p for p in args.notebooks] or NOTEBOOKS
  for path in paths:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute(nb, timeout=args.timeout)
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    print(f"{path.name}: {seconds:.1f} s, {path.stat().st_size / 1024:.0f} KB", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
