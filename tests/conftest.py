"""Shared pytest fixtures for dpjax."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pathlib

# XLA:CPU's multi-threaded Eigen pool has been seen to wedge (a hang in block_until_ready) on
# vmapped programs on 2-core machines. The suite runs one worker per core, so intra-op threads
# buy nothing here (measured: no slower without them). Set before any backend starts; the
# workers and the subprocesses the tests start inherit it.
if "--xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import jax  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np
import pytest

# One persistent XLA cache for the whole run, shared by the workers and the subprocesses the
# tests start (CLI runs, notebook kernels): a program that another test already compiled (same
# HLO, same options: JAX's key) is loaded instead of compiled. The controller makes the folder
# before the workers start and removes it at the end (pytest_unconfigure); a run that sets
# JAX_COMPILATION_CACHE_DIR itself keeps its own folder. A size limit turns on JAX's file lock
# (the dev extra's filelock), so two workers never read an entry while it is being written;
# without filelock the run goes without the cache.
try:
  import filelock  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
except ImportError:
  filelock = None
if filelock is not None:
  if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile  # pylint: disable=g-import-not-at-top
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="dpjax-tests-xla-")
    os.environ["DPJAX_TESTS_OWN_XLA_CACHE"] = str(os.getpid())
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))
  jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
  jax.config.update("jax_compilation_cache_max_size",
                    int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))


# The Threefry PRNG lowered unrolled on CPU (tests/_site/sitecustomize.py: the same bits,
# checked by tests/test_suite_prng.py, compiled ~3x faster), here and, through PYTHONPATH, in
# every Python process the tests start. DPJAX_TESTS_ROLLED_THREEFRY=1 keeps JAX's default.
SITE_DIR = pathlib.Path(__file__).resolve().parent / "_site"


def _unrolled_threefry() -> bool:
  if os.environ.get("DPJAX_TESTS_ROLLED_THREEFRY") == "1":
    os.environ["DPJAX_TESTS_UNROLLED_THREEFRY"] = "0"
    return False
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("dpjax_tests_site", SITE_DIR / "sitecustomize.py")
  site = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(site)
  applied = site.use_unrolled_threefry()
  os.environ["DPJAX_TESTS_UNROLLED_THREEFRY"] = "1" if applied else "0"
  if str(SITE_DIR) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SITE_DIR), os.environ.get("PYTHONPATH")) if p)
  return applied


UNROLLED_THREEFRY = _unrolled_threefry()


FULL_OPTION = "--full"


def pytest_addoption(parser):
  parser.addoption(
      FULL_OPTION, action="store_true", default=False,
      help="also run the full-strength tier (tests marked `full`): the benchmarks' --quick runs, "
      "the audits at their full run counts, the whole demo and the notebooks. The default run "
      "runs smaller fixtures of the same checks.")


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "full: full-strength check, run only with `python -m pytest --full` (the default "
      "run covers the same code with a smaller fixture)")


def pytest_collection_modifyitems(config, items):
  """Without ``--full``, the items marked ``full`` are deselected (reported as deselected)."""
  if config.getoption(FULL_OPTION):
    return
  kept, dropped = [], []
  for item in items:
    (dropped if item.get_closest_marker("full") else kept).append(item)
  if dropped:
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def full_run(request) -> bool:
  """Whether this run is the full-strength one (``python -m pytest --full``)."""
  return bool(request.config.getoption(FULL_OPTION))


def pytest_unconfigure(config):
  """The process that made the shared XLA cache folder removes it."""
  del config
  if os.environ.get("DPJAX_TESTS_OWN_XLA_CACHE") == str(os.getpid()):
    import shutil  # pylint: disable=g-import-not-at-top
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The shared LIBSVM files live beside the repository (../shared/data); CI lays
# a copy there. DPJAX_DATA_DIR overrides the location.
DATA_DIR = pathlib.Path(os.environ.get("DPJAX_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


# |z| above which a noise-scale test rejects (two-sided p ~ 7e-6 under the
# null; with fixed keys the tests are deterministic, the bound only guards
# against a wrong scale passing by luck).
Z_MAX = 4.5


def scale_z(samples, var):
  """z-score of H0: E[|s_k|^2 / p] = var_k, over independent rows s_k (CLT).

  ``samples`` [K, ...]: row k is one independent draw (its p coordinates
  may be dependent); ``var`` [K] or scalar: the claimed per-coordinate
  variance. The standard error comes from the empirical spread of the row
  statistics, so non-Gaussian rows (a random std) are handled exactly.
  """
  s = np.asarray(samples, np.float64)
  s = s.reshape(s.shape[0], -1)
  q = np.mean(s**2, axis=1) / np.asarray(var, np.float64)
  return (q.mean() - 1.0) / (q.std(ddof=1) / math.sqrt(q.size))


def unit_ball_batch(seed: int, n: int, d: int, scale: float = 1.0):
  """``(x [n, d], y [n])`` float32: Gaussian rows times ``scale``, clipped to ``||x|| <= scale``
  when ``scale <= 1`` (else left as drawn), and random labels in {-1, +1}."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)) * scale
  if scale <= 1.0:
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1))[:, None]
  y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
  return jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)


def run_cli(argv, capsys):
  """``python -m dpjax ARGV`` in-process: ``(exit status, stderr)``."""
  from dpjax import cli  # pylint: disable=g-import-not-at-top
  try:
    code = cli.main(argv)
  except SystemExit as exc:
    code = exc.code
  return code, capsys.readouterr().err


def check_demo_output(out: str, err: str, *, seed: int, n: int, d: int, epsilons) -> None:
  """Checks ``python -m dpjax demo``'s report: setup line, privacy note, one row per method, bar.

  ``tests/test_readme.py`` calls it on the README's demo command (the default
  demo, run in full there and nowhere else).
  """
  from dpjax import accounting, training  # pylint: disable=g-import-not-at-top
  assert f"synthetic(seed={seed}, n={n}, d={d})" in out
  assert "tuning T on the results of private runs would itself leak privacy" in out
  for eps in epsilons:
    rho = accounting.epsilon_to_zcdp(eps, 1 / n**2, "gaussian")
    assert f"eps={eps:g} (rho={rho:.3g})" in out
  rows = [line for line in out.splitlines() if line.startswith("| ") and "±" in line]
  assert [r.split("|")[1].strip() for r in rows] == list(training.ALGORITHMS) + ["auto"]
  assert all(r.count("±") == len(epsilons) and r.rstrip(" |").endswith(" s") for r in rows)
  assert "(precond-gd, T=" in rows[-1] or "(dp-gd, T=" in rows[-1]
  last = err.strip().splitlines()[-1]  # the progress bar: the optimum + 7 algorithms
  assert last.startswith("dpjax demo [####") and " 8/8 " in last and last.endswith("done")


def maybe_jit(fn, jit):
  """``jax.jit(fn)`` when ``jit``, else ``fn``: tests run both ways."""
  return jax.jit(fn) if jit else fn


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


def check_smoke_needs_quick(main, tmp_path, capsys, *argv: str) -> None:
  """A benchmark's ``main([*argv, "--smoke"])`` without ``--quick`` exits 2, says why, and writes
  nothing (``_harness.parse_args``)."""
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as exc:
    main([*argv, "--smoke", "--out-dir", str(out)])
  assert exc.value.code == 2 and "--smoke needs --quick" in capsys.readouterr().err
  assert not out.exists()


# sha256(x bytes + y bytes) of a dataset as loaded -> dpjax.problem.solve.optimum_loss(x, y).
# Its float64 Newton costs seconds on these (tens of seconds on a1a.t and on the
# separable a5a); the solver is tested in test_solve.py (a1a.t: test_real_a1a_t).
KNOWN_OPTIMA = {
    # _harness.load_dataset("a1a.t") (paper preprocessing)
    "fb30db34088a861bf6c9f3f977c6cb0ec3f666dfdbfed1733d6735e1e6bc8619": (0.32548238473136587, 0.0),
    # dpjax.data.synthetic(0), n=10,000, d=100 (_harness "synthetic")
    "6e60cd85839bdc5f4fd73bf21af6efd970811719e313d819781e1204978e877c": (0.5939713862990877, 0.0),
    # _harness.load_dataset("a5a"): separable, ridge 1e-9
    "e5143f41318d4036abeae236eba647c0e963ef72d5c3b54d25f465008f7b25b7": (0.3231219738280393, 1e-09),
}


@contextlib.contextmanager
def known_optima():
  """Within it, ``solve.optimum_loss`` (which every fit calls) and its re-export
  ``training.optimum_loss`` return :data:`KNOWN_OPTIMA` for those datasets.

  Any other data (or the same data differing in one bit) is computed as usual.
  """
  from dpjax import training  # pylint: disable=g-import-not-at-top
  from dpjax.problem import solve  # pylint: disable=g-import-not-at-top
  real = solve.optimum_loss

  def optimum_loss(x, y):
    x, y = np.ascontiguousarray(jax.device_get(x)), np.ascontiguousarray(jax.device_get(y))
    digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    return KNOWN_OPTIMA[digest] if digest in KNOWN_OPTIMA else real(x, y)

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(solve, "optimum_loss", optimum_loss)  # what the fits call
    mp.setattr(training, "optimum_loss", optimum_loss)  # its public re-export
    yield


@pytest.fixture(autouse=True)
def _fresh_compiled_programs(request):
  """A test that replaces library functions (``monkeypatch``) gets no program compiled before.

  ``dpjax.compiled`` keys a run's program on its configuration, not on the
  functions it traces; a replaced function must be traced anew, so the shared
  programs are dropped before and after such a test.
  """
  if "monkeypatch" not in request.fixturenames:
    yield
    return
  from dpjax import compiled  # pylint: disable=g-import-not-at-top
  compiled.clear()
  yield
  compiled.clear()
