"""The shared benchmark harness: datasets, machine record, timing, progress, results.

Every script under ``benchmarks/`` uses it, so that all results files carry
the same record and all scripts take the same flags:

* :func:`add_common_args` adds ``--data-dir`` (the LIBSVM files, default
  ``../shared/data`` or ``$DPJAX_DATA_DIR``), ``--out-dir`` (default
  ``benchmarks/results``) and ``--quick`` (a smoke run of under 2 minutes,
  which CI runs; its outputs go to ``<out-dir>/quick/`` unless ``--out-dir``
  is given, so a smoke run never overwrites committed full results).
* :func:`load_dataset` loads a dataset of :data:`DATASETS` by name with the
  paper preprocessing (the benchmarks reproduce the paper; it is not private
  and warns :class:`dpjax.PrivacyLeakWarning`, so their tables must say they
  use it), or another ``preprocess`` of :func:`dpjax.data.load_libsvm`; a
  missing file raises :class:`MissingDataError`, whose message names the file
  and the ``--data-dir`` flag.
* :func:`machine_info` records the CPU, cores, load, versions, devices, the git
  commit and the exact command; :func:`write_results` stores it beside every
  JSON and markdown result.
* :func:`progress` / :class:`ProgressBar` (from :mod:`dpjax.progress`) draw a
  dependency-free progress bar over a grid (stderr).
* :func:`compile_fn` and :func:`time_interleaved` keep compile time out of the
  timings (warm up, ``block_until_ready``, median and min, interleave the
  variants being compared).
* :data:`ALGORITHMS` and :func:`algorithm_family` read the algorithms from
  :data:`dpjax.training.ALGORITHMS`: an algorithm added to ``dpjax.fit`` is
  benchmarked by adding one line to :data:`FAMILIES` (its T grid family).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jaxlib
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
DEFAULT_DATA_DIR = pathlib.Path(os.environ.get("DPJAX_DATA_DIR", REPO.parent / "shared" / "data"))
SCHEMA_VERSION = 1

sys.path.insert(0, str(REPO))
from dpjax import _common  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import data as data_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import training  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.progress import ProgressBar, progress  # noqa: E402,F401  pylint: disable=g-import-not-at-top


# ----------------------------------------------------------------------------
# Datasets.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """How to build one benchmark dataset (paper preprocessing unless a script asks otherwise)."""

  name: str
  file: str | None  # LIBSVM file under --data-dir; None for generated data.
  n_features: int | None = None
  positive_label: float | None = None  # phishing: 0/1 labels, 1 -> +1.
  synthetic_n: int | None = None
  synthetic_d: int | None = None


DATASETS = {
    s.name: s
    for s in (
        DatasetSpec("a1a.t", "a1a.t.bz2", 123),
        DatasetSpec("a5a", "a5a.bz2", 123),
        DatasetSpec("a9a", "a9a.bz2", 123),
        DatasetSpec("w8a", "w8a.bz2", 300),
        DatasetSpec("phishing", "phishing.bz2", 68, positive_label=1),
        DatasetSpec("ijcnn1", "ijcnn1.bz2", 22),
        DatasetSpec("synthetic", None, synthetic_n=10_000, synthetic_d=100),
        # Covertype's size (n = 581,012, d = 54 with the intercept), generated
        # like `synthetic` (Ganesh et al. 2023, Sec. 6): the real file is not available.
        DatasetSpec("covertype-synthetic", None, synthetic_n=581_012, synthetic_d=54),
    )
}


class MissingDataError(FileNotFoundError):
  """A benchmark dataset file is absent from ``--data-dir``."""


def load_dataset(name: str, data_dir: os.PathLike | str = DEFAULT_DATA_DIR,
                 *, seed: int = 0, preprocess: str = "paper") -> data_lib.Dataset:
  """Loads benchmark dataset ``name`` (a key of :data:`DATASETS`), float32.

  LIBSVM files get ``preprocess`` of :func:`dpjax.data.load_libsvm`: by
  default the paper preprocessing (standardise, unit rows, intercept), which
  reproduces the paper but is NOT private (its column statistics are read
  from the data; it warns ``dpjax.PrivacyLeakWarning``); ``"per-row"`` is the
  private default of the library, ``"none"`` the raw features.
  ``phishing``'s 0/1 labels map to -1/+1. Generated data uses
  :func:`dpjax.data.synthetic` with ``seed`` (``preprocess`` does not apply).

  Raises:
    ValueError: unknown name.
    MissingDataError: the file is not in ``data_dir``; the message names the
      ``--data-dir`` flag.
  """
  if name not in DATASETS:
    raise ValueError(f"unknown dataset {name!r}; choose from {sorted(DATASETS)}.")
  spec = DATASETS[name]
  if spec.file is None:
    return data_lib.synthetic(seed, n=spec.synthetic_n, d=spec.synthetic_d)
  path = pathlib.Path(data_dir) / spec.file
  if not path.exists():
    raise MissingDataError(
        f"dataset {name!r} needs {spec.file}, which is not in {pathlib.Path(data_dir)}; pass "
        "--data-dir DIR with the directory that holds the LIBSVM files (e.g. --data-dir "
        "../shared/data), or leave the dataset out with --datasets."
    )
  return data_lib.load_libsvm(path, n_features=spec.n_features, preprocess=preprocess,
                              positive_label=spec.positive_label)


def dataset_bytes(ds: data_lib.Dataset) -> int:
  """Bytes of the arrays a fit reads: ``x`` and ``y``."""
  return int(np.asarray(ds.x).nbytes + np.asarray(ds.y).nbytes)


# ----------------------------------------------------------------------------
# Algorithms: one line per algorithm.
# ----------------------------------------------------------------------------

# algorithm -> its T-grid family. Adding an algorithm to `dpjax.fit` and one
# line here puts it in every benchmark.
FAMILIES = {
    "dp-gd": "first-order",
    "hess-clip": "second-order",
    "hess-add": "second-order",
    "qu-clip": "second-order",
    "qu-add": "second-order",
}
ALGORITHMS = tuple(a for a in training.ALGORITHMS if a in FAMILIES)


def algorithm_family(algorithm: str) -> str:
  return FAMILIES[algorithm]


# ----------------------------------------------------------------------------
# Command line, machine record, results.
# ----------------------------------------------------------------------------


def add_common_args(parser: argparse.ArgumentParser) -> None:
  """Adds ``--data-dir``, ``--out-dir`` and ``--quick``."""
  parser.add_argument(
      "--data-dir", type=pathlib.Path, default=DEFAULT_DATA_DIR,
      help=f"directory with the LIBSVM .bz2 files (default {DEFAULT_DATA_DIR}, or $DPJAX_DATA_DIR)")
  parser.add_argument(
      "--out-dir", type=pathlib.Path, default=None,
      help=f"where results go (default {RESULTS_DIR}; with --quick, {RESULTS_DIR}/quick)")
  parser.add_argument(
      "--quick", action="store_true",
      help="smoke run (small data and grids, under 2 minutes); CI runs it")


def parse_args(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
  """``parser.parse_args(argv)`` and the harness's rule for the flags it shares: ``--smoke``
  (a script's smallest run, the test suite's default) needs ``--quick``."""
  args = parser.parse_args(argv)
  if getattr(args, "smoke", False) and not args.quick:
    parser.error("--smoke needs --quick")
  return args


def out_dir(args: argparse.Namespace) -> pathlib.Path:
  """The results directory of a parsed command line (created)."""
  path = args.out_dir or (RESULTS_DIR / "quick" if args.quick else RESULTS_DIR)
  path.mkdir(parents=True, exist_ok=True)
  return path


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def git_commit() -> dict[str, Any]:
  """The checkout's commit and whether it has uncommitted changes."""
  def git(*a):
    return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=10)
  try:
    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "dirty": None}
  if head.returncode != 0:
    return {"commit": None, "dirty": None}
  return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def machine_info() -> dict[str, Any]:
  """CPU model, cores, load, memory, versions, devices, git commit and the command."""
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:  # pragma: no cover - non-Linux
    usable = os.cpu_count()
  try:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  except (ValueError, OSError, AttributeError):  # pragma: no cover
    mem_gib = None
  return {
      "cpu": cpu_model(),
      "cores": os.cpu_count(),
      "usable_cores": usable,
      "memory_gib": None if mem_gib is None else round(mem_gib, 1),
      "load_average": [round(v, 2) for v in os.getloadavg()],
      "python": platform.python_version(),
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "numpy": np.__version__,
      "backend": jax.default_backend(),
      "devices": [str(d) for d in jax.devices()],
      **git_commit(),
      "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
      "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
  }


def markdown_header(title: str, info: dict[str, Any]) -> list[str]:
  """The title and the machine / versions / commit / command lines of a results file."""
  commit = info.get("commit") or "unknown"
  if info.get("dirty"):
    commit += " (with uncommitted changes)"
  return [
      f"# {title}",
      "",
      f"- machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
      f"{info.get('memory_gib')} GiB, backend {info['backend']}, "
      f"load average at start {info['load_average']}",
      f"- versions: python {info['python']}, jax {info['jax']}, jaxlib {info['jaxlib']}, "
      f"numpy {info['numpy']}",
      f"- commit: {commit}; date: {info.get('date')}",
      f"- command: `{info['command']}`",
  ]


def write_results(directory: pathlib.Path, stem: str, payload: dict[str, Any],
                  markdown: str) -> tuple[pathlib.Path, pathlib.Path]:
  """Writes ``<stem>.json`` (payload + schema version) and ``<stem>.md``."""
  directory.mkdir(parents=True, exist_ok=True)
  payload = {"schema": SCHEMA_VERSION, **payload}
  json_path, md_path = directory / f"{stem}.json", directory / f"{stem}.md"
  _write_text_atomic(json_path, json.dumps(payload, indent=1, default=_json_default) + "\n")
  _write_text_atomic(md_path, markdown if markdown.endswith("\n") else markdown + "\n")
  return json_path, md_path


def _write_text_atomic(path: pathlib.Path, text: str) -> None:
  """Writes ``text`` to ``path`` at once (:func:`dpjax._common.write_atomic`): an interrupted
  write leaves the previous file intact and no partial or temporary file."""
  _common.write_atomic(path, lambda f: f.write(text.encode()))


def _json_default(o: Any) -> Any:
  if isinstance(o, np.ndarray):
    return o.tolist()
  if isinstance(o, (np.floating, np.integer, np.bool_)):
    return o.item()
  if isinstance(o, pathlib.Path):
    return str(o)
  raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# ----------------------------------------------------------------------------
# Progress and timing.
# ----------------------------------------------------------------------------


def data_files_present(names: Sequence[str], data_dir: os.PathLike | str) -> bool:
  """Checks, before any work starts, that every named dataset's file is there.

  Prints the first missing one's error (which names ``--data-dir``) and
  returns False; True when all are present (generated data needs no file).
  """
  for name in names:
    spec = DATASETS[name]
    if spec.file is not None and not (pathlib.Path(data_dir) / spec.file).exists():
      try:
        load_dataset(name, data_dir)
      except MissingDataError as err:
        print(f"error: {err}", file=sys.stderr)
        return False
  return True


def print_report(report: Callable, directory: pathlib.Path, info: dict[str, Any],
                 quick: bool) -> int:
  """``--report-only``: rebuilds the combined outputs and prints the markdown.

  ``report(directory, info, quick)`` returns the markdown path. Returns the
  exit status: 2, with a one-line error, when there are no results to read.
  """
  try:
    print(report(directory, info, quick).read_text())
  except FileNotFoundError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  return 0


def panels(k: int, *, width: float, height: float, min_width: float = 0.0,
           extra_height: float = 0.0):
  """``(plt, fig, axes)``: a grid of ``k`` panels, up to 3 a row (Agg backend).

  Each panel is ``width`` x ``height`` inches; the figure is at least
  ``min_width`` wide and ``extra_height`` taller (room for a legend).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  cols = min(3, k)
  rows = -(-k // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(max(width * cols, min_width),
                                                height * rows + extra_height), squeeze=False)
  return plt, fig, axes


def log_log_panel(ax, title: str, xlabel: str, ylabel: str) -> None:
  """Log-log axes with a title, labels and a light grid (every results plot)."""
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_title(title)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(True, which="both", alpha=0.3)


def hide_unused(axes, k: int) -> None:
  """Turns off the panels after the first ``k`` of a :func:`panels` grid."""
  for ax in list(axes.flat)[k:]:
    ax.axis("off")


def compile_fn(fn: Callable, *args) -> tuple[Callable, float]:
  """AOT-compiles a jitted ``fn`` for ``args``; returns (compiled, seconds)."""
  t0 = time.perf_counter()
  compiled = fn.lower(*args).compile()
  return compiled, time.perf_counter() - t0


def time_interleaved(
    fns: Sequence[Callable], args: Sequence[tuple], reps: int, warmup: int = 2,
    alternate: bool = False,
) -> list[dict[str, float]]:
  """Times compiled ``fns[k](*args[k])`` round-robin; returns ms stats each.

  Each entry is ``{median_ms, min_ms, reps, times_ms}``; ``times_ms[i]`` is
  round ``i``, so two programs' times can be compared pairwise
  (:func:`paired_ratio`). ``alternate=True`` runs every other round in reverse
  order, so that of two programs adjacent in ``fns`` each runs first (right
  after whatever ran before the pair) in half the rounds.
  """
  for _ in range(warmup):
    for fn, a in zip(fns, args):
      jax.block_until_ready(fn(*a))
  times = [[] for _ in fns]
  for r in range(reps):
    order = range(len(fns) - 1, -1, -1) if alternate and r % 2 else range(len(fns))
    for k in order:
      t0 = time.perf_counter()
      jax.block_until_ready(fns[k](*args[k]))
      times[k].append((time.perf_counter() - t0) * 1e3)
  return [
      {"median_ms": statistics.median(t), "min_ms": min(t), "reps": len(t), "times_ms": t}
      for t in times
  ]


def paired_ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
  """Median over rounds of ``a``'s time over ``b``'s in the same round.

  For two programs of one :func:`time_interleaved` call (best adjacent in its
  list): the machine's slow drifts hit both sides of each pair, so the median
  of the pairs is steadier than the ratio of the two medians.
  """
  return statistics.median(x / y for x, y in zip(a["times_ms"], b["times_ms"]))
