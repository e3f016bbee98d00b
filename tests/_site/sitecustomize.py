"""The test suite's interpreter start-up hook, for the Python processes the tests start.

tests/conftest.py puts this folder first on ``PYTHONPATH`` for the run, so every
subprocess a test starts (``python -m dpjax`` CLI runs, README blocks, notebook
kernels, the multi-device sharding runs) imports this module at start-up, as
Python's ``site`` does with any ``sitecustomize``. It gives them the suite's
own compile-time setting, :func:`use_unrolled_threefry` (when
``DPJAX_TESTS_UNROLLED_THREEFRY=1``), and then runs the ``sitecustomize`` this
one shadows, if the interpreter has one. Nothing here changes what a program
computes: tests/test_suite_prng.py checks the bits against a process without
it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

ENV = "DPJAX_TESTS_UNROLLED_THREEFRY"


def use_unrolled_threefry() -> bool:
  """Lowers JAX's Threefry PRNG on CPU unrolled, as JAX does on every other platform.

  JAX lowers Threefry on CPU as a rolled 5-iteration while loop and everywhere
  else unrolled. Both are the same integer arithmetic, so the bits are
  identical, but XLA:CPU compiles the unrolled form about 3x faster (measured:
  0.12 s against 0.40 s for one vmapped ``jax.random.bits``, and 15-30% of a
  whole ``dpjax.fit`` program). Returns whether it was applied (False for
  another JAX layout, which keeps its default).
  """
  try:
    from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
    from jax._src.random import threefry2x32 as threefry  # pylint: disable=g-import-not-at-top
    rule = threefry._threefry2x32_lowering_rule  # pylint: disable=protected-access
    primitive = threefry.threefry2x32_p
  except (ImportError, AttributeError):
    return False
  mlir.register_lowering(primitive, rule, platform="cpu")
  return True


def _run_shadowed() -> None:
  """Runs the next ``sitecustomize`` on ``sys.path`` (the one this module shadows), if any."""
  here = os.path.dirname(os.path.abspath(__file__))
  rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
  spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
  if spec is None or spec.loader is None:
    return
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # at interpreter start-up, not when conftest imports it
  if os.environ.get(ENV) == "1":
    use_unrolled_threefry()
  _run_shadowed()
