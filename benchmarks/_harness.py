"""Small benchmark harness: machine/version info and compile-excluded timing.

Follows the hygiene of ecosystem.md section 6: record the load average next to
the numbers, measure compile time separately, warm up, time with
``block_until_ready``, report median and min, and interleave the variants
being compared so that a change in machine load hits all of them alike.
"""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jaxlib
import numpy as np


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
  """CPU model, core counts, load average, versions and the command line."""
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:  # pragma: no cover - non-Linux
    usable = os.cpu_count()
  return {
      "cpu": cpu_model(),
      "cores": os.cpu_count(),
      "usable_cores": usable,
      "load_average": [round(v, 2) for v in os.getloadavg()],
      "python": platform.python_version(),
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "numpy": np.__version__,
      "backend": jax.default_backend(),
      "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
  }


def compile_fn(fn: Callable, *args) -> tuple[Callable, float]:
  """AOT-compiles a jitted ``fn`` for ``args``; returns (compiled, seconds)."""
  t0 = time.perf_counter()
  compiled = fn.lower(*args).compile()
  return compiled, time.perf_counter() - t0


def time_interleaved(
    fns: Sequence[Callable], args: Sequence[tuple], reps: int, warmup: int = 2
) -> list[dict[str, float]]:
  """Times compiled ``fns[k](*args[k])`` round-robin; returns ms stats each."""
  for _ in range(warmup):
    for fn, a in zip(fns, args):
      jax.block_until_ready(fn(*a))
  times = [[] for _ in fns]
  for _ in range(reps):
    for k, (fn, a) in enumerate(zip(fns, args)):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*a))
      times[k].append((time.perf_counter() - t0) * 1e3)
  return [
      {"median_ms": statistics.median(t), "min_ms": min(t), "reps": len(t)} for t in times
  ]


def markdown_header(title: str, info: dict[str, Any]) -> list[str]:
  """The title and the machine / versions / command lines of a results file."""
  return [
      f"# {title}",
      "",
      f"- machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
      f"load average at start {info['load_average']}",
      f"- versions: python {info['python']}, jax {info['jax']}, jaxlib {info['jaxlib']}, "
      f"numpy {info['numpy']}, backend {info['backend']}",
      f"- command: `{info['command']}`",
  ]
