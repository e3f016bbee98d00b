"""Shared pytest fixtures for dpjax."""

from __future__ import annotations

import os
import pathlib

import jax
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The shared LIBSVM files live beside the repository (../shared/data); CI lays
# a copy there. DPJAX_DATA_DIR overrides the location.
DATA_DIR = pathlib.Path(os.environ.get("DPJAX_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


def shared_data_file(name: str) -> pathlib.Path:
  """Path of a shared dataset file; skips the calling test when it is absent."""
  path = DATA_DIR / name
  if not path.exists():
    pytest.skip(f"shared dataset {name} not found in {DATA_DIR}")
  return path


@pytest.fixture
def x64():
  """Runs the test body with float64 enabled in JAX (restored afterwards)."""
  with jax.enable_x64(True):
    yield


BENCHMARKS_DIR = REPO_ROOT / "benchmarks"


def load_benchmark(name: str):
  """Imports ``benchmarks/<name>.py`` as a module (``benchmarks/`` is not a package)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  if str(BENCHMARKS_DIR) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS_DIR))
  if name in sys.modules:
    return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, BENCHMARKS_DIR / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module
