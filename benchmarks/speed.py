"""Speed of the private optimizers against the hardware limit (float32, compile excluded).

Usage::

  python benchmarks/speed.py [--data-dir ../shared/data] [--out-dir DIR] [--reps 20]
                             [--datasets a1a.t w8a covertype-synthetic] [--quick [--smoke]]

Four measurements. Every timing is of an AOT-compiled program (compile seconds
recorded separately), after a warm-up, with ``block_until_ready``, median and
min over reps that run round-robin with the baselines they are compared to
(:func:`_harness.time_interleaved`).

1. **Per-iteration time** of every algorithm of :data:`_harness.ALGORITHMS` at
   the shapes of ``a1a.t``, ``w8a`` and ``covertype-synthetic`` (n=581,012,
   d=54). One iteration is the jitted step of a :func:`dpjax.fit` run: the
   fused data pass (:func:`dpjax.problem.glm.logistic_loss_and_grad` for the
   first-order family, :func:`dpjax.problem.glm.logistic_grad_and_curvature` for the
   second-order one), the transform's update, ``optax.apply_updates`` and the
   divergence guard. Baselines: first-order against **two matvecs**
   ``x @ w`` and ``c @ x`` (what a gradient must read), second-order against
   **Gram + matvec** ``x.T @ x`` and ``x @ w``. Target: ratio <= 2 for both.
2. **Scaling** of the DP-GD and hess-clip iteration (and their baselines) in n
   (10^4 .. 10^6 at d=50) and in d (10 .. 1000 at n=10^4), synthetic data;
   log-log plot ``speed_scaling.png``.
3. **Vmapped repeats**: the whole fit program (``jit(vmap(lax.scan of
   steps))``, as :func:`dpjax.fit` compiles it) with 16 repeats vs 1 repeat;
   DP-GD with T=100, hess-clip with T=8. Target for DP-GD: ratio <= 4 (the
   repeats share each pass over ``x``). None for hess-clip: every repeat has
   its own curvature matrix ``X^T diag(c_r) X``, so 16 repeats are 16x the
   Gram work by construction; the ratio is reported.
4. **Peak memory of a fit** (dp-gd and hess-clip), each in a fresh
   subprocess: the data is loaded and the one-repeat fit program compiled,
   then it runs once. Reported: (a) XLA's buffer assignment for the program,
   ``compiled.memory_analysis()`` (argument + output + temp - alias bytes, and
   temp alone), and (b) the process's peak RSS increase during the run (peak
   reset through ``/proc/self/clear_refs`` right before the run, then
   ``VmHWM`` minus ``VmRSS``; where that is unavailable, the
   ``ru_maxrss`` delta, a lower bound). **Acceptance target: XLA's total
   (data + outputs + temporaries) <= 3x the dataset's bytes**
   (:func:`_harness.dataset_bytes`, ``x`` and ``y``). The RSS figure is the
   cross-check; the JAX runtime's own resident memory (present before the
   run) is not part of the fit and is excluded.

``--quick`` (a smoke run, well under a minute) uses ``a1a.t`` when its file is
present (skipped otherwise) and a synthetic n=20,000, d=50 problem in place of
covertype (dp-gd and hess-clip on it, one algorithm per family; dp-gd only on
``a1a.t``), two small points per scaling axis (dp-gd only), T=10 / T=2, few
reps, and runs the repeats section (dp-gd only) and the memory section (dp-gd
and hess-clip) on the synthetic shape only; it still writes every section and
the plot. Compiling is most of its time, so each program it skips is a
compilation saved. ``--quick --smoke`` (the test suite's run) times the scaling
section at the per-iteration synthetic shape alone, one point for both axes, whose
programs are already compiled. A file dataset named with ``--datasets`` (or any of them in a
full run) that is missing from ``--data-dir`` is an error: exit status 2 with
a message naming the flag.

Output (``<out-dir>/speed.json``, ``speed.md``, ``speed_scaling.png``). JSON
top-level keys (plus ``schema``, added by :func:`_harness.write_results`):

* ``machine``: :func:`_harness.machine_info`, plus ``load_average_end``.
* ``quick``: bool. ``settings``: reps, shapes, T per algorithm, targets.
  ``elapsed_s``: wall time of the whole script.
* ``per_iteration``: rows ``{dataset, n, d, algorithm, family, ms_median,
  ms_min, reps, baseline, baseline_ms, baseline_ms_min, ratio, target, met,
  compile_s, baseline_compile_s, float_ms, float_ms_min, float_compile_s,
  exact_ms, exact_ms_min, twin_reps, exact_over_float, compile_exact_over_float,
  fit_compile_s, float_fit_compile_s, fit_compile_exact_over_float}``; ``ratio =
  ms_median / baseline_ms`` (both medians), ``met = ratio <= target``;
  ``exact_*``/``float_*`` time the step and its ``unsafe_float_noise=True``
  twin in a round-robin of the two alone (``twin_reps`` rounds),
  ``exact_over_float`` is the median over rounds of the paired ratio
  (:func:`_harness.paired_ratio`), ``compile_exact_over_float`` the ratio of
  the steps' least compile times and ``fit_compile_*`` those of the whole fit
  programs.
* ``scaling``: rows ``{axis ("n" or "d"), n, d, algorithm, ms_median, ms_min,
  reps, baseline, baseline_ms, baseline_ms_min, ratio, compile_s, exact_ms,
  exact_ms_min, float_ms, float_ms_min, twin_reps, float_compile_s,
  exact_over_float, compile_exact_over_float}`` (the twin fields as above).
* ``repeats``: rows ``{dataset, n, d, algorithm, steps, repeats, one_ms,
  one_ms_min, many_ms, many_ms_min, ratio, reps, target, met, compile_one_s,
  compile_many_s}``; ``ratio = many_ms / one_ms`` (medians); ``target`` and
  ``met`` are null for the second-order family.
* ``memory``: rows ``{dataset, n, d, algorithm, steps, dataset_bytes,
  xla_argument_bytes, xla_output_bytes, xla_alias_bytes, xla_temp_bytes,
  xla_total_bytes, xla_total_ratio, xla_temp_ratio, rss_before_bytes,
  rss_peak_increase_bytes, rss_increase_ratio, rss_total_ratio, rss_method,
  target, met, compile_s, run_s}``; ratios are to ``dataset_bytes``,
  ``rss_total_ratio = (dataset_bytes + rss_peak_increase_bytes) /
  dataset_bytes``, ``met = xla_total_ratio <= target``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import gc
import json
import os
import pathlib
import resource
import subprocess
import sys
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import optax

_BENCH_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(_BENCH_DIR))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

from dpjax import data as data_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import leaks  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.mechanisms import noise  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import training  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.training import loop  # noqa: E402  pylint: disable=g-import-not-at-top

SHAPES = ("a1a.t", "w8a", "covertype-synthetic")
QUICK_SYNTHETIC = (20_000, 50)  # Stands in for covertype-synthetic with --quick.

SCALING_ALGORITHMS = ("dp-gd", "hess-clip")
SCALING_N = ((10_000, 50), (30_000, 50), (100_000, 50), (300_000, 50), (1_000_000, 50))
SCALING_D = ((10_000, 10), (10_000, 30), (10_000, 100), (10_000, 300), (10_000, 1000))
# With --quick, (20_000, 50) is the per-iteration synthetic shape (compiled once).
QUICK_SCALING_N = ((5_000, 50), (20_000, 50))
QUICK_SCALING_D = ((5_000, 20), (5_000, 50))
# --quick --smoke (the test suite's smoke run): the scaling section's one point is the
# per-iteration synthetic shape, on both axes, so it compiles nothing of its own.
SMOKE_SCALING = (QUICK_SYNTHETIC,)

# --quick: one compilation per program dominates it. The per-iteration section
# runs one algorithm per family on the synthetic shape (the step program is
# `training.fit_step`, which tests/test_training.py runs for every algorithm);
# the scaling, file-dataset and repeats sections run dp-gd only (hess-clip's
# whole fit program still runs in the memory section).
QUICK_ALGORITHMS = ("dp-gd", "hess-clip")
QUICK_SCALING_ALGORITHMS = ("dp-gd",)

REPEATS = 16
REPEAT_ALGORITHMS = ("dp-gd", "hess-clip")
QUICK_REPEAT_ALGORITHMS = ("dp-gd",)
MEMORY_ALGORITHMS = ("dp-gd", "hess-clip")
STEPS = {"first-order": 100, "second-order": 8}  # T of a whole run, by family.
QUICK_STEPS = {"first-order": 10, "second-order": 2}

TARGETS = {"first-order": 2.0, "second-order": 2.0, "repeats": 4.0, "memory": 3.0}
BASELINE_NAMES = {
    "first-order": "two matvecs x @ w, c @ x",
    "second-order": "Gram x.T @ x + matvec x @ w",
}

# Total zCDP budget of the benchmarked transforms (the noise scale does not
# change the work done).
_RHO = 0.1

# Seconds of timed reps to aim for per comparison (reps are clamped to
# [_MIN_REPS, --reps]).
_BUDGET_S = {"per_iteration": 8.0, "scaling": 2.5, "repeats": 8.0}
_QUICK_BUDGET_S = {"per_iteration": 0.6, "scaling": 0.3, "repeats": 0.5}
_MIN_REPS = 3
_COMPILES = 5  # compile times: the least of this many fresh compilations (1 with --quick).
_COMPILE_REPS = [_COMPILES]
# The exact-vs-float twin timing gets this share of a comparison's time budget.
_TWIN_SHARE = 0.5


# ----------------------------------------------------------------------------
# Shapes.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
  """A benchmark problem: a :data:`_harness.DATASETS` entry or synthetic (n, d)."""

  label: str
  dataset: str | None = None  # Key of _harness.DATASETS.
  n: int | None = None  # For dpjax.data.synthetic(0, n=n, d=d).
  d: int | None = None

  def load(self, data_dir: os.PathLike | str) -> data_lib.Dataset:
    """Loads the data (float32 numpy); raises ``MissingDataError`` for absent files."""
    if self.dataset is not None:
      return _harness.load_dataset(self.dataset, data_dir)
    return data_lib.synthetic(0, n=self.n, d=self.d)

  def is_file(self) -> bool:
    """Whether the data comes from a LIBSVM file under ``--data-dir``."""
    return self.dataset is not None and _harness.DATASETS[self.dataset].file is not None


def _shape_for(name: str, quick: bool) -> Shape:
  """The shape run for ``--datasets`` entry ``name`` (small synthetic in --quick)."""
  if name == "covertype-synthetic" and quick:
    n, d = QUICK_SYNTHETIC
    return Shape(f"synthetic-{n}x{d} (quick)", n=n, d=d)
  return Shape(name, dataset=name)


# ----------------------------------------------------------------------------
# The programs: one step, one whole fit, and the baselines.
# ----------------------------------------------------------------------------


def _transform(algorithm: str, n: int, steps: int, key: int | jax.Array,
               float_noise: bool = False) -> tuple[optax.GradientTransformationExtraArgs, str | None]:
  """The transform ``dpjax.fit`` builds for ``algorithm``, and its curvature (or None).

  ``float_noise=True`` builds the NOT private twin that draws ``jax.random.normal``
  noise (``unsafe_float_noise=True``): the baseline that measures what the exact
  sampler of :mod:`dpjax.mechanisms.noise` costs.
  """
  if not float_noise:
    return training.make_transform(algorithm, n=n, rho=_RHO, steps=steps, key=key)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", leaks.PrivacyLeakWarning)
    return training.make_transform(algorithm, n=n, rho=_RHO, steps=steps, key=key,
                                   unsafe_float_noise=True)


def _step_body(tx: optax.GradientTransformationExtraArgs, curvature: str | None,
               w0: jax.Array) -> Callable:
  """One iteration of a fit (:func:`dpjax.training.fit_step`): ``(w, state, loss, diverged)``."""
  return training.fit_step(tx, curvature, w0, training.DEFAULT_GUARD_RADIUS)


def make_step(algorithm: str, n: int, d: int, steps: int, dtype: Any = jnp.float32,
              float_noise: bool = False) -> tuple[Callable, jax.Array, Any]:
  """``(jit(step), w, state)``: the per-iteration program and its inputs."""
  tx, curvature = _transform(algorithm, n, steps, key=0, float_noise=float_noise)
  w0 = jnp.zeros((d,), dtype)
  w = _iterate(d, dtype)
  return jax.jit(_step_body(tx, curvature, w0)), w, tx.init(w)


def _iterate(d: int, dtype: Any = jnp.float32) -> jax.Array:
  """A fixed unit-norm iterate, so that the margins are not all 0."""
  return noise.random_direction(jax.random.key(1), d, dtype)


def make_fit_program(algorithm: str, n: int, d: int, steps: int,
                     float_noise: bool = False) -> Callable:
  """``run(keys, x, y)``: the program ``dpjax.fit`` compiles (init zeros, one level).

  :func:`dpjax.training.loop.fit_program`, with the budget of the other rows;
  ``float_noise=True`` builds its NOT private twin (``unsafe_float_noise``).
  """
  kwargs = dict(n=n, steps=steps)
  if not float_noise:
    return loop.fit_program(algorithm, kwargs, d=d, rho=_RHO)
  program = loop.fit_program(algorithm, {**kwargs, "unsafe_float_noise": True}, d=d, rho=_RHO)

  def traced_quietly(keys: jax.Array, x: jax.Array, y: jax.Array) -> Any:
    # The twin's transform is built (and warns) when the program is traced.
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", leaks.PrivacyLeakWarning)
      return program(keys, x, y)

  return jax.jit(traced_quietly)


def _two_matvecs(w: jax.Array, x: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The DP-GD baseline: the two passes over ``x`` a gradient needs."""
  # `c @ x`, not `x.T @ c`: the latter makes XLA:CPU transpose x.
  return x @ w, c @ x


def _gram_matvec(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The Newton baseline: a plain Gram and one matvec."""
  return x.T @ x, x @ w


def _baseline(family: str, w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[Callable, tuple]:
  """``(jit(baseline), args)`` for an algorithm family."""
  if family == "first-order":
    return jax.jit(_two_matvecs), (w, x, y)
  return jax.jit(_gram_matvec), (w, x)


# ----------------------------------------------------------------------------
# Timing.
# ----------------------------------------------------------------------------


def _time(fns: Sequence[Callable], args: Sequence[tuple], max_reps: int,
          budget_s: float) -> list[dict[str, float]]:
  """Interleaved timing (every other round reversed), reps sized to take about ``budget_s``.

  One untimed round runs first (warm-up and cost estimate); rounds that take
  under half a second get a second warm-up round. Reps are then clamped to
  ``[_MIN_REPS, max_reps]``.
  """
  t0 = time.perf_counter()
  for fn, a in zip(fns, args):
    jax.block_until_ready(fn(*a))
  round_s = max(time.perf_counter() - t0, 1e-9)
  reps = max(_MIN_REPS, min(max_reps, int(budget_s / round_s)))
  return _harness.time_interleaved(fns, args, reps=reps, warmup=1 if round_s < 0.5 else 0,
                                   alternate=True)


# Compiled programs by shape, so that a shape timed twice (with --quick, the
# synthetic problem is also a scaling point) is compiled once.
_STEP_CACHE: dict[tuple, tuple[Callable, float, jax.Array, Any]] = {}
_BASELINE_CACHE: dict[tuple, tuple[Callable, float]] = {}


def _compiled_step(algorithm: str, x: jax.Array, y: jax.Array, steps: int,
                   float_noise: bool = False) -> tuple[Callable, float, tuple]:
  """``(compiled step, compile seconds, args)`` for data ``x, y`` (cached by shape).

  The compile time is the least of :data:`_COMPILES` fresh compilations (a fresh
  transform each time, so nothing is cached), to damp the machine's noise.
  """
  n, d = x.shape
  key = (algorithm, n, d, str(x.dtype), steps, float_noise)
  if key not in _STEP_CACHE:
    times = []
    for _ in range(_COMPILE_REPS[0]):
      fn, w, state = make_step(algorithm, n, d, steps, x.dtype, float_noise)
      compiled, seconds = _harness.compile_fn(fn, w, state, x, y)
      times.append(seconds)
    _STEP_CACHE[key] = (compiled, min(times), w, state)
  compiled, seconds, w, state = _STEP_CACHE[key]
  return compiled, seconds, (w, state, x, y)


def _compiled_baseline(family: str, x: jax.Array, y: jax.Array) -> tuple[Callable, float, tuple]:
  """``(compiled baseline, compile seconds, args)`` of a family (cached by shape)."""
  n, d = x.shape
  fn, args = _baseline(family, _iterate(d, x.dtype), x, y)
  key = (family, n, d, str(x.dtype))
  if key not in _BASELINE_CACHE:
    _BASELINE_CACHE[key] = _harness.compile_fn(fn, *args)
  return (*_BASELINE_CACHE[key], args)


def _fit_compile_s(algorithm: str, x: jax.Array, y: jax.Array, steps: int,
                   float_noise: bool) -> float:
  """Least of :data:`_COMPILE_REPS` fresh compilations of the whole fit program (one repeat)."""
  n, d = x.shape
  keys = jax.random.split(jax.random.key(0), 1)
  return min(_harness.compile_fn(make_fit_program(algorithm, n, d, steps, float_noise),
                                 keys, x, y)[1] for _ in range(_COMPILE_REPS[0]))


def per_iteration(label: str, ds: data_lib.Dataset, max_reps: int, budget_s: float,
                  steps: dict[str, int],
                  algorithms: Sequence[str] = _harness.ALGORITHMS,
                  fit_compile: bool = False) -> list[dict[str, Any]]:
  """Per-iteration time of ``algorithms`` on ``ds``, interleaved with their baselines.

  Every algorithm and every baseline needed runs in one round-robin, so each
  ratio compares programs timed under the same machine conditions. Then each
  step is timed against its float-noise twin in a round-robin of the two alone
  (every other round reversed), so that no heavier program runs between them;
  ``fit_compile`` also compiles both twins' whole fit programs.
  """
  x, y = jax.device_put(ds.x), jax.device_put(ds.y)
  n, d = x.shape
  families = list(dict.fromkeys(_harness.algorithm_family(a) for a in algorithms))
  names = [*families, *algorithms]
  programs = [_compiled_baseline(f, x, y) for f in families]
  programs += [_compiled_step(a, x, y, steps[_harness.algorithm_family(a)]) for a in algorithms]
  stats = dict(zip(names, _time([p[0] for p in programs], [p[2] for p in programs],
                                max_reps, budget_s)))
  compile_s = dict(zip(names, [p[1] for p in programs]))
  twins = {}
  for a, exact_p in zip(algorithms, programs[len(families):]):
    t = steps[_harness.algorithm_family(a)]
    float_p = _compiled_step(a, x, y, t, float_noise=True)
    compile_s[f"{a} (float noise)"] = float_p[1]
    twins[a] = _time([exact_p[0], float_p[0]], [exact_p[2], float_p[2]], max_reps,
                     budget_s * _TWIN_SHARE)
    if fit_compile:
      twins[a] += [_fit_compile_s(a, x, y, t, False), _fit_compile_s(a, x, y, t, True)]
  rows = []
  for algorithm in algorithms:
    family = _harness.algorithm_family(algorithm)
    s, b = stats[algorithm], stats[family]
    ratio = s["median_ms"] / b["median_ms"]
    rows.append({
        "dataset": label, "n": int(n), "d": int(d), "algorithm": algorithm,
        "family": family, "ms_median": s["median_ms"], "ms_min": s["min_ms"],
        "reps": s["reps"], "baseline": BASELINE_NAMES[family],
        "baseline_ms": b["median_ms"], "baseline_ms_min": b["min_ms"],
        "ratio": ratio, "target": TARGETS[family], "met": bool(ratio <= TARGETS[family]),
        "compile_s": compile_s[algorithm], "baseline_compile_s": compile_s[family],
        "exact_ms": twins[algorithm][0]["median_ms"],
        "exact_ms_min": twins[algorithm][0]["min_ms"],
        "float_ms": twins[algorithm][1]["median_ms"],
        "float_ms_min": twins[algorithm][1]["min_ms"],
        "twin_reps": twins[algorithm][0]["reps"],
        "float_compile_s": compile_s[f"{algorithm} (float noise)"],
        "exact_over_float": _harness.paired_ratio(twins[algorithm][0], twins[algorithm][1]),
        "compile_exact_over_float":
            compile_s[algorithm] / compile_s[f"{algorithm} (float noise)"],
        **({"fit_compile_s": twins[algorithm][2], "float_fit_compile_s": twins[algorithm][3],
            "fit_compile_exact_over_float": twins[algorithm][2] / twins[algorithm][3]}
           if fit_compile else {}),
    })
  return rows


def scaling_grid(quick: bool, smoke: bool = False) -> list[tuple[int, int, tuple[str, ...]]]:
  """Unique ``(n, d, axes)`` points; a point on both axes is timed once (``smoke``: one point)."""
  points: dict[tuple[int, int], list[str]] = {}
  for axis, grid in (("n", SMOKE_SCALING if smoke else QUICK_SCALING_N if quick else SCALING_N),
                     ("d", SMOKE_SCALING if smoke else QUICK_SCALING_D if quick else SCALING_D)):
    for nd in grid:
      points.setdefault(nd, []).append(axis)
  return [(n, d, tuple(axes)) for (n, d), axes in points.items()]


def scaling_rows(n: int, d: int, axes: Sequence[str], max_reps: int, budget_s: float,
                 steps: dict[str, int],
                 algorithms: Sequence[str] = SCALING_ALGORITHMS) -> list[dict[str, Any]]:
  """DP-GD and hess-clip iteration (with baselines) on synthetic (n, d), one row per axis."""
  ds = data_lib.synthetic(0, n=n, d=d)
  rows = per_iteration(f"synthetic-{n}x{d}", ds, max_reps, budget_s, steps, algorithms)
  keep = ("n", "d", "algorithm", "ms_median", "ms_min", "reps", "baseline", "baseline_ms",
          "baseline_ms_min", "ratio", "compile_s", "exact_ms", "exact_ms_min", "float_ms",
          "float_ms_min", "twin_reps", "float_compile_s", "exact_over_float",
          "compile_exact_over_float")
  return [{"axis": axis, **{k: r[k] for k in keep}} for axis in axes for r in rows]


def repeats_row(shape: Shape, ds: data_lib.Dataset, algorithm: str, steps: int,
                max_reps: int, budget_s: float) -> dict[str, Any]:
  """The fit program with 1 repeat vs :data:`REPEATS` vmapped repeats."""
  x, y = jax.device_put(ds.x), jax.device_put(ds.y)
  n, d = x.shape
  run = make_fit_program(algorithm, n, d, steps)
  key1 = jax.random.split(jax.random.key(0), 1)
  keys = jax.random.split(jax.random.key(1), REPEATS)
  one_c, one_compile = _harness.compile_fn(run, key1, x, y)
  many_c, many_compile = _harness.compile_fn(run, keys, x, y)
  one_t, many_t = _time([one_c, many_c], [(key1, x, y), (keys, x, y)], max_reps, budget_s)
  ratio = many_t["median_ms"] / one_t["median_ms"]
  target = TARGETS["repeats"] if _harness.algorithm_family(algorithm) == "first-order" else None
  return {
      "dataset": shape.label, "n": int(n), "d": int(d), "algorithm": algorithm,
      "steps": steps, "repeats": REPEATS,
      "one_ms": one_t["median_ms"], "one_ms_min": one_t["min_ms"],
      "many_ms": many_t["median_ms"], "many_ms_min": many_t["min_ms"],
      "ratio": ratio, "reps": one_t["reps"], "target": target,
      "met": None if target is None else bool(ratio <= target),
      "compile_one_s": one_compile, "compile_many_s": many_compile,
  }


# ----------------------------------------------------------------------------
# Memory: one fresh subprocess per (shape, algorithm).
# ----------------------------------------------------------------------------


def _proc_status_kib(field: str) -> int | None:
  """A ``kB`` field of ``/proc/self/status`` (e.g. ``VmRSS``), or None."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1])
  except OSError:
    pass
  return None


def _reset_peak_rss() -> bool:
  """Resets this process's VmHWM to its current RSS (Linux >= 4.0)."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def memory_child(spec: dict[str, Any]) -> dict[str, Any]:
  """Body of a memory subprocess: load, compile, then measure one fit run."""
  shape = Shape(**spec["shape"])
  algorithm, steps = spec["algorithm"], spec["steps"]
  ds = shape.load(spec["data_dir"])
  nbytes = _harness.dataset_bytes(ds)
  x, y = jax.device_put(ds.x), jax.device_put(ds.y)
  n, d = x.shape
  keys = jax.random.split(jax.random.key(0), 1)
  jax.block_until_ready((x, y, keys))
  compiled, compile_s = _harness.compile_fn(make_fit_program(algorithm, n, d, steps), keys, x, y)
  ma = compiled.memory_analysis()
  arg_b, out_b = int(ma.argument_size_in_bytes), int(ma.output_size_in_bytes)
  alias_b, temp_b = int(ma.alias_size_in_bytes), int(ma.temp_size_in_bytes)
  total_b = arg_b + out_b - alias_b + temp_b

  gc.collect()
  maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  rss_before = _proc_status_kib("VmRSS")
  reset = rss_before is not None and _reset_peak_rss()
  t0 = time.perf_counter()
  jax.block_until_ready(compiled(keys, x, y))
  run_s = time.perf_counter() - t0
  hwm = _proc_status_kib("VmHWM")
  if reset and hwm is not None:
    increase = max(0, hwm - rss_before) * 1024
    method = "VmHWM after run - VmRSS before (peak reset via clear_refs)"
  else:
    increase = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before) * 1024
    method = "ru_maxrss delta (lower bound)"
  return {
      "dataset": shape.label, "n": int(n), "d": int(d), "algorithm": algorithm,
      "steps": steps, "dataset_bytes": nbytes,
      "xla_argument_bytes": arg_b, "xla_output_bytes": out_b, "xla_alias_bytes": alias_b,
      "xla_temp_bytes": temp_b, "xla_total_bytes": total_b,
      "xla_total_ratio": total_b / nbytes, "xla_temp_ratio": temp_b / nbytes,
      "rss_before_bytes": (rss_before or maxrss_before) * 1024,
      "rss_peak_increase_bytes": increase, "rss_increase_ratio": increase / nbytes,
      "rss_total_ratio": (nbytes + increase) / nbytes, "rss_method": method,
      "target": TARGETS["memory"], "met": bool(total_b / nbytes <= TARGETS["memory"]),
      "compile_s": compile_s, "run_s": run_s,
  }


def _memory_subprocess(spec: dict[str, Any], timeout_s: float = 600) -> dict[str, Any]:
  """Runs :func:`memory_child` in a fresh interpreter; returns its row."""
  code = (
      "import json, sys; sys.path.insert(0, sys.argv[1]); import speed; "
      "print('SPEED-MEMORY ' + json.dumps(speed.memory_child(json.loads(sys.argv[2]))))"
  )
  proc = subprocess.run(
      [sys.executable, "-c", code, str(_BENCH_DIR), json.dumps(spec)],
      capture_output=True, text=True, timeout=timeout_s, check=False)
  for line in proc.stdout.splitlines():
    if line.startswith("SPEED-MEMORY "):
      return json.loads(line[len("SPEED-MEMORY "):])
  raise RuntimeError(
      f"memory subprocess for {spec['shape']['label']} / {spec['algorithm']} failed "
      f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def memory_rows(shapes: Sequence[Shape], data_dir: pathlib.Path,
                steps: dict[str, int]) -> list[dict[str, Any]]:
  """Runs the memory subprocesses (as many at once as usable cores, at most 2)."""
  specs = [
      {"shape": dataclasses.asdict(s), "algorithm": a, "data_dir": str(data_dir),
       "steps": steps[_harness.algorithm_family(a)]}
      for s in shapes for a in MEMORY_ALGORITHMS
  ]
  try:
    workers = max(1, min(2, len(os.sched_getaffinity(0))))
  except AttributeError:  # pragma: no cover - non-Linux
    workers = 1
  results: dict[int, dict[str, Any]] = {}
  labels = [f"{s['shape']['label']} {s['algorithm']}" for s in specs]

  def finished(pool: concurrent.futures.Executor) -> Iterator[str]:
    futures = {pool.submit(_memory_subprocess, s): k for k, s in enumerate(specs)}
    for fut in concurrent.futures.as_completed(futures):
      results[futures[fut]] = fut.result()
      yield labels[futures[fut]]

  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    for _ in _harness.progress(finished(pool), total=len(specs), desc="memory"):
      pass
  return [results[k] for k in range(len(specs))]


# ----------------------------------------------------------------------------
# Output.
# ----------------------------------------------------------------------------


def plot_scaling(rows: Sequence[dict[str, Any]], path: pathlib.Path, title: str) -> None:
  """Log-log plot of per-iteration time vs n and vs d (algorithms solid, baselines dashed)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  colors = dict(zip(SCALING_ALGORITHMS, ("tab:blue", "tab:red")))
  for ax, axis in zip(axes, ("n", "d")):
    sub = [r for r in rows if r["axis"] == axis]
    for algorithm in SCALING_ALGORITHMS:
      pts = sorted((r[axis], r["ms_median"], r["baseline_ms"], r["baseline"])
                   for r in sub if r["algorithm"] == algorithm)
      if not pts:
        continue
      xs = [p[0] for p in pts]
      ax.plot(xs, [p[1] for p in pts], "o-", color=colors[algorithm], label=algorithm)
      ax.plot(xs, [p[2] for p in pts], "s--", color=colors[algorithm], alpha=0.6,
              label=f"baseline: {pts[0][3]}")
    fixed = "d" if axis == "n" else "n"
    fixed_vals = sorted({r[fixed] for r in sub})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sorted({r[axis] for r in sub}))  # Ticks at the measured points.
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(f"{axis}  ({fixed} = {', '.join(f'{v:,}' for v in fixed_vals)})")
    ax.set_ylabel("ms per iteration (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _met(row: dict[str, Any]) -> str:
  """The "target met" cell of a row."""
  if row["met"] is None:
    return "n/a"
  return f"{'yes' if row['met'] else 'NO'} (<= {row['target']:g})"


def _fmt_bytes(b: float) -> str:
  """Bytes as MiB."""
  return f"{b / 2**20:.1f} MiB"


def to_markdown(info: dict[str, Any], payload: dict[str, Any]) -> str:
  """The ``speed.md`` report."""
  s = payload["settings"]
  lines = _harness.markdown_header("Speed against the hardware limit (float32)", info) + [
      f"- {'QUICK smoke run (small shapes, few reps): not a result. ' if payload['quick'] else ''}"
      "times in ms, median (min) over interleaved reps after warm-up (reps sized to a time "
      f"budget, at most {s['reps']}); compile time excluded and listed separately.",
      f"- total wall time {payload['elapsed_s']:.0f} s; load average at end "
      f"{info.get('load_average_end')}.",
      "",
      "## 1. Per-iteration time vs hardware-bound baselines",
      "",
      "One iteration = the jitted step of `dpjax.fit`: fused data pass + transform update + "
      "`apply_updates` + guard. Baselines: first-order (DP-GD) vs two matvecs `x @ w`, "
      "`c @ x` (target <= 2x); second-order (Newton) vs Gram `x.T @ x` + matvec `x @ w` "
      "(target <= 2x). Ratio of medians.",
      "",
      "| data | n | d | algorithm | iteration | baseline | baseline time | ratio | target met |"
      " compile (s) |",
      "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in payload["per_iteration"]:
    lines.append(
        f"| {r['dataset']} | {r['n']:,} | {r['d']} | {r['algorithm']} | "
        f"{r['ms_median']:.2f} ({r['ms_min']:.2f}) | {r['baseline']} | "
        f"{r['baseline_ms']:.2f} ({r['baseline_ms_min']:.2f}) | **{r['ratio']:.2f}** | "
        f"{_met(r)} | {r['compile_s']:.2f} |")
  lines += [
      "",
      "## 2. Scaling in n and d (synthetic data)",
      "",
      "![per-iteration time vs n and d](speed_scaling.png)",
      "",
      "| axis | n | d | algorithm | iteration | baseline time | ratio | compile (s) |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for r in payload["scaling"]:
    lines.append(
        f"| {r['axis']} | {r['n']:,} | {r['d']} | {r['algorithm']} | "
        f"{r['ms_median']:.2f} ({r['ms_min']:.2f}) | {r['baseline_ms']:.2f} | "
        f"{r['ratio']:.2f} | {r['compile_s']:.2f} |")
  lines += [
      "",
      f"## 3. Whole fit program, {REPEATS} vmapped repeats vs 1 repeat",
      "",
      "`jit(vmap(lax.scan of T steps))` exactly as `dpjax.fit` compiles it, with 1 and with "
      f"{REPEATS} keys. Target for DP-GD: <= {TARGETS['repeats']:g}x (the repeats share every "
      "pass over x: the matvecs become matrix products). None for Newton: each repeat needs its "
      f"own curvature matrix `X^T diag(c_r) X`, so {REPEATS} repeats do {REPEATS}x the Gram work "
      "by construction.",
      "",
      f"| data | n | d | algorithm | T | 1 repeat (ms) | {REPEATS} repeats (ms) | ratio | "
      "target met | compile 1 / many (s) |",
      "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in payload["repeats"]:
    lines.append(
        f"| {r['dataset']} | {r['n']:,} | {r['d']} | {r['algorithm']} | {r['steps']} | "
        f"{r['one_ms']:.1f} ({r['one_ms_min']:.1f}) | {r['many_ms']:.1f} ({r['many_ms_min']:.1f}) | "
        f"**{r['ratio']:.2f}** | {_met(r)} | "
        f"{r['compile_one_s']:.2f} / {r['compile_many_s']:.2f} |")
  lines += [
      "",
      f"## 4. Peak memory of a one-repeat fit (target: XLA total <= {TARGETS['memory']:g}x "
      "the dataset's bytes)",
      "",
      "Each row is a fresh subprocess: data loaded, the fit program compiled, then one run. "
      "**XLA total** = argument + output - alias + temp bytes of `compiled.memory_analysis()` "
      "(the data, the outputs and every temporary of the program): this is the figure compared "
      "with the target. **RSS increase** = the process's peak RSS during the run minus its RSS "
      "just before it (data resident and program compiled; the JAX runtime's own memory is "
      "excluded); *data + RSS* is the comparable cross-check.",
      "",
      "| data | n | d | algorithm | T | dataset | XLA total (ratio) | XLA temp (ratio) | "
      "RSS increase (ratio) | data + RSS ratio | target met |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in payload["memory"]:
    lines.append(
        f"| {r['dataset']} | {r['n']:,} | {r['d']} | {r['algorithm']} | {r['steps']} | "
        f"{_fmt_bytes(r['dataset_bytes'])} | {_fmt_bytes(r['xla_total_bytes'])} "
        f"(**{r['xla_total_ratio']:.2f}**) | {_fmt_bytes(r['xla_temp_bytes'])} "
        f"({r['xla_temp_ratio']:.2f}) | {_fmt_bytes(r['rss_peak_increase_bytes'])} "
        f"({r['rss_increase_ratio']:.2f}) | {r['rss_total_ratio']:.2f} | "
        f"{_met(r)} |")
  lines += [
      "",
      "## 5. Cost of floating-point-safe noise (exact sampler vs float noise)",
      "",
      "Each step of sections 1 and 2 (its exact timing above) was then timed against its twin "
      "built with `unsafe_float_noise=True` (`jax.random.normal` noise, NOT private: the "
      "pre-exact code path) in a round-robin of the two alone, every other round reversed (so "
      "each runs first in half the rounds). Iteration ratio: the median over rounds of exact / "
      "float in the same round (medians (min) of each in ms, over `reps` rounds). Compile: the "
      f"least of {_COMPILE_REPS[0]} fresh compilation(s) of the step, and for section 1 of the "
      "whole fit program (the `lax.scan` of T steps and the loss, one repeat: what `dpjax.fit` "
      "compiles). Targets: iteration <= 1.1x, compile <= 1.1x.",
      "",
      "| data | n | d | algorithm | exact (ms) | float (ms) | reps | **iteration ratio** | "
      "step compile exact / float (s) | step compile ratio | fit compile exact / float (s) | "
      "**fit compile ratio** |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  seen = set()
  for r in [*payload["per_iteration"], *payload["scaling"]]:
    label = r.get("dataset", f"synthetic-{r['n']}x{r['d']}")
    if (label, r["n"], r["d"], r["algorithm"]) in seen:
      continue
    seen.add((label, r["n"], r["d"], r["algorithm"]))
    fit = (f"{r['fit_compile_s']:.2f} / {r['float_fit_compile_s']:.2f} | "
           f"**{r['fit_compile_exact_over_float']:.3f}**" if "fit_compile_s" in r else "- | -")
    lines.append(
        f"| {label} | {r['n']:,} | {r['d']} | {r['algorithm']} | "
        f"{r['exact_ms']:.3f} ({r['exact_ms_min']:.3f}) | {r['float_ms']:.3f} "
        f"({r['float_ms_min']:.3f}) | {r['twin_reps']} | **{r['exact_over_float']:.3f}** | "
        f"{r['compile_s']:.2f} / {r['float_compile_s']:.2f} | "
        f"{r['compile_exact_over_float']:.3f} | {fit} |")
  if payload["quick"]:
    lines += ["", "(--quick: XLA's temporaries are a few MiB that do not grow with n, so on the "
              "tiny quick data the ratios overstate what a fit of a real dataset needs.)"]
  methods = sorted({r["rss_method"] for r in payload["memory"]})
  if methods:
    lines += ["", f"RSS method: {'; '.join(methods)}."]
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------
# Main.
# ----------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
  """Parses the command line (``--reps`` defaults by mode)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--reps", type=int, default=None,
                      help="most timed reps per comparison (default 20; 5 with --quick); fewer "
                      "are run where a comparison would exceed its time budget (at least 3)")
  parser.add_argument("--datasets", nargs="+", choices=SHAPES, default=None,
                      help=f"shapes to run (default: all of {', '.join(SHAPES)}; with --quick, "
                      "a1a.t when present and a small synthetic problem instead of covertype)")
  parser.add_argument("--smoke", action="store_true",
                      help="with --quick: the scaling section on the per-iteration synthetic "
                      "shape alone (one point for both axes; the test suite's smoke run)")
  args = _harness.parse_args(parser, argv)
  if args.reps is None:
    args.reps = 5 if args.quick else 20
  if args.reps < 1:
    parser.error("--reps must be >= 1")
  return args


def _load_shapes(args: argparse.Namespace) -> list[tuple[Shape, data_lib.Dataset]]:
  """Loads every requested shape up front (so a missing file fails before any timing)."""
  explicit = args.datasets is not None
  names = args.datasets if explicit else (
      ["a1a.t", "covertype-synthetic"] if args.quick else list(SHAPES))
  loaded = []
  for name in dict.fromkeys(names):
    shape = _shape_for(name, args.quick)
    try:
      loaded.append((shape, shape.load(args.data_dir)))
    except _harness.MissingDataError as err:
      if explicit or not args.quick:
        raise
      print(f"note: {err} (skipped in --quick)", file=sys.stderr)
  return loaded


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the benchmark; returns the exit status (2 for a missing data file)."""
  t_start = time.perf_counter()
  args = _parse(argv)
  try:
    shapes = _load_shapes(args)
  except _harness.MissingDataError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  quick = args.quick
  _COMPILE_REPS[0] = 1 if quick else _COMPILES
  budget = _QUICK_BUDGET_S if quick else _BUDGET_S
  steps = QUICK_STEPS if quick else STEPS
  info = _harness.machine_info()
  out = _harness.out_dir(args)

  data = {shape.label: (shape, ds) for shape, ds in shapes}
  # --quick: QUICK_ALGORITHMS on the synthetic shape, dp-gd only on the files;
  # the whole-program sections on one shape (compiles dominate).
  whole = list(data)
  if quick:
    whole = [k for k, (s, _) in data.items() if not s.is_file()][:1] or whole[:1]

  per_iter = []
  for label in _harness.progress(list(data), desc="per-iteration"):
    shape, ds = data[label]
    algorithms = _harness.ALGORITHMS
    if quick:
      algorithms = QUICK_SCALING_ALGORITHMS if shape.is_file() else QUICK_ALGORITHMS
    per_iter += per_iteration(label, ds, args.reps, budget["per_iteration"], steps, algorithms,
                              fit_compile=True)

  scaling = []
  grid = {f"n={n:,} d={d}": (n, d, axes) for n, d, axes in scaling_grid(quick, args.smoke)}
  for label in _harness.progress(list(grid), desc="scaling"):
    scaling += scaling_rows(*grid[label], args.reps, budget["scaling"], steps,
                            QUICK_SCALING_ALGORITHMS if quick else SCALING_ALGORITHMS)
  scaling.sort(key=lambda r: (r["axis"], r["algorithm"], r["n"], r["d"]))

  rep_grid = {f"{label} {a}": (label, a) for label in whole
              for a in (QUICK_REPEAT_ALGORITHMS if quick else REPEAT_ALGORITHMS)}
  repeats = []
  for item in _harness.progress(list(rep_grid), desc="repeats"):
    label, algorithm = rep_grid[item]
    shape, ds = data[label]
    repeats.append(repeats_row(shape, ds, algorithm, steps[_harness.algorithm_family(algorithm)],
                               args.reps, budget["repeats"]))

  memory = memory_rows([data[label][0] for label in whole], args.data_dir, steps)

  info["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
  payload = {
      "machine": info,
      "quick": quick,
      "settings": {
          "reps": args.reps, "min_reps": _MIN_REPS, "budget_s": budget, "smoke": args.smoke,
          "shapes": [s.label for s, _ in shapes], "steps": steps, "repeats": REPEATS,
          "targets": TARGETS, "rho": _RHO,
      },
      "per_iteration": per_iter,
      "scaling": scaling,
      "repeats": repeats,
      "memory": memory,
  }
  png = out / "speed_scaling.png"
  plot_scaling(scaling, png, f"dpjax per-iteration time, {info['cpu']}, "
               f"{info['usable_cores']} cores{' (quick)' if quick else ''}")
  payload["elapsed_s"] = time.perf_counter() - t_start
  md = to_markdown(info, payload)
  json_path, md_path = _harness.write_results(out, "speed", payload, md)
  print(md)
  print(f"wrote {json_path}, {md_path} and {png} in {payload['elapsed_s']:.0f} s")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
