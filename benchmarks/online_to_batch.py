"""DP online-to-batch benchmarks (Zhang, Tran & Cutkosky, NeurIPS 2022): the cost of one step, and the rates.

``--speed``: the wall-clock cost of one step of ``dpjax.online_to_batch``
(OGD learner, tree noise, per-example gradient differences at ``x_t`` and
``x_{t-1}``, clipping) against one non-private minibatch gradient step
(``optax.sgd`` on the mean logistic gradient of the same batch), for a ``d =
100`` logistic model with batch 1024, in the same process, interleaved,
compile time excluded. Each variant is timed two ways:

* **per call**: one jitted step per call (includes the dispatch of a call);
* **in a scan**: ``lax.scan`` over ``--scan-steps`` steps, time / steps (the
  cost inside a compiled training loop, as :func:`dpjax.fit` runs it).

The criterion: conversion / non-private <= 3, in a scan. Rows:
the fused GLM path in the two tree modes (every node released through
``dpjax.mechanisms.noise``'s exact sampler), the same with ``unsafe_float_noise=True``
(float noise, NOT private: what exactness costs, for information, outside the
criterion) and the generic ``loss_fn`` path (``vmap`` of ``grad``, for
information).

``--rates``: the excess population loss of one private pass against ``n``
on synthetic least squares and logistic regression (``_rates.py`` has the
population and the protocol): d in {10, 100}, n from 10^3 to 10^6 (batch 10),
eps in {0.5, 1, 2, 8} at delta = n^-1.1, 10 seeds vmapped, the four
conversions against single-pass DP-SGD and DP-FTRL at equal eps. Criteria
(for ``otb``): the log-log slope at eps = 8 in [-0.65, -0.35]; at
eps = 0.5 some decade of n where the loss falls >= 10x.

Usage::

  python benchmarks/online_to_batch.py --speed [--quick [--smoke]] [--out-dir ...]
  python benchmarks/online_to_batch.py --rates [--quick [--smoke]] [--out-dir ...]

``--quick`` (a smoke run): ``--speed`` with 8 steps per scan and 20 reps;
``--rates`` on the grid of :data:`QUICK_RATES_GRID` (least squares, d = 5,
n in {200, 2000}, eps in {0.5, 8}, 2 seeds, ``otb`` and single-pass DP-SGD).
``--quick --smoke`` (the test suite's run; compiling is nearly all of its
time, so it runs the fewest distinct programs that still produce every
output): ``--speed`` times the non-private step and the fused GLM path in the
buffered tree with exact node releases only (:data:`SMOKE_VARIANTS`: the
rows of the criterion's kind; the other rows are the same loop over more
transforms), ``--rates`` runs :data:`SMOKE_RATES_GRID` (``otb`` alone, one
seed: two compiled passes, the fewest that give a slope and both criteria).
Both write every output file, with the same schema; the JSON records
``quick`` and ``smoke``.

Outputs ``online_to_batch_speed.{json,md}`` and
``online_to_batch_rates.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top
import _rates  # noqa: E402  pylint: disable=g-import-not-at-top

import jax  # noqa: E402  pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # noqa: E402  pylint: disable=g-import-not-at-top
import optax  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top

STEM = "online_to_batch_speed"
RATES_STEM = "online_to_batch_rates"
SPEED_CRITERION = 3.0
DIM, BATCH = 100, 1024
# --quick --smoke --speed: how many of variants()'s rows run: the non-private step and the fused
# GLM path in the buffered tree with exact node releases (the first conversion row).
SMOKE_VARIANTS = 2
# --rates grids (keyword arguments of _rates.run; the full run takes its defaults).
QUICK_RATES_GRID = dict(losses=("least_squares",), dims=(5,), ns=(200, 2000),
                        epsilons=(0.5, 8.0), seeds=2, methods=("otb", "single-pass-dp-sgd"))
SMOKE_RATES_GRID = dict(QUICK_RATES_GRID, seeds=1, methods=("otb",))


def _logistic(w, example):
  x, y = example
  return jnp.logaddexp(0.0, -y * jnp.dot(w, x))


def _batches(steps: int, seed: int = 0) -> tuple[jax.Array, jax.Array]:
  x, y = dpjax.synthetic(seed, n=steps * BATCH, d=DIM)
  return (jnp.asarray(x).reshape(steps, BATCH, DIM), jnp.asarray(y).reshape(steps, BATCH))


def variants(steps: int, smoke: bool = False) -> dict[str, Any]:
  """name -> (init state, one-step function (state, xb, yb) -> state).

  ``smoke``: the first :data:`SMOKE_VARIANTS` rows only.
  """
  out = {}
  sgd = optax.sgd(0.1)
  w0 = jnp.zeros(DIM)

  def plain_step(carry, xb, yb):
    w, s = carry
    g = jax.grad(lambda v: jnp.mean(jax.vmap(_logistic, (None, 0))(v, (xb, yb))))(w)
    u, s = sgd.update(g, s, w)
    return optax.apply_updates(w, u), s

  out["non-private minibatch gradient step (sgd)"] = ((w0, sgd.init(w0)), plain_step)
  clip = dpjax.transforms.difference_clip_bound(1.0, 1.0, 0.25, 2.0)
  rows = (("buffered", {"loss": "logistic"}), ("honaker", {"loss": "logistic"}),
          ("buffered", {"loss": "logistic", "unsafe_float_noise": True}),
          ("buffered", {"loss_fn": _logistic}))
  for mode, kwargs in rows[:SMOKE_VARIANTS - 1] if smoke else rows:
    with warnings.catch_warnings():  # the float-noise row says so in its name.
      warnings.simplefilter("ignore", dpjax.PrivacyLeakWarning)
      tx = dpjax.online_to_batch(dpjax.online.ogd(radius=1.0), batch_size=BATCH, steps=steps,
                                 rho=1.0, clip_norm=clip, key=0, mode=mode, **kwargs)

    def otb_step(carry, xb, yb, tx=tx):
      w, s = carry
      u, s = tx.update(None, s, w, batch=(xb, yb))
      return optax.apply_updates(w, u), s

    path = "fused GLM" if "loss" in kwargs else "generic loss_fn"
    unsafe = ", float noise: NOT private" if kwargs.get("unsafe_float_noise") else ""
    out[f"online_to_batch ({path}, {mode} tree{unsafe})"] = ((w0, tx.init(w0)), otb_step)
  return out


def measure(steps: int, reps: int, smoke: bool = False) -> list[dict[str, Any]]:
  xs, ys = _batches(steps)
  rows = []
  fns, args, scan_fns, scan_args, names, compile_s = [], [], [], [], [], []
  for name, (state, step) in variants(steps, smoke).items():
    one = jax.jit(step)
    one_c, c1 = _harness.compile_fn(one, state, xs[0], ys[0])

    def scan(state, xs, ys, step=step):
      return jax.lax.scan(lambda c, b: (step(c, *b), None), state, (xs, ys))[0]

    scan_c, c2 = _harness.compile_fn(jax.jit(scan), state, xs, ys)
    fns.append(one_c)
    args.append((state, xs[0], ys[0]))
    scan_fns.append(scan_c)
    scan_args.append((state, xs, ys))
    names.append(name)
    compile_s.append(c1 + c2)
  per_call = _harness.time_interleaved(fns, args, reps)
  in_scan = _harness.time_interleaved(scan_fns, scan_args, max(3, reps // 10))
  base_call, base_scan = per_call[0]["median_ms"], in_scan[0]["median_ms"] / steps
  for name, pc, sc, cs in zip(names, per_call, in_scan, compile_s):
    scan_ms = sc["median_ms"] / steps
    rows.append({"variant": name, "per_call_ms": pc["median_ms"], "per_call_min_ms": pc["min_ms"],
                 "in_scan_ms": scan_ms, "ratio_per_call": pc["median_ms"] / base_call,
                 "ratio_in_scan": scan_ms / base_scan, "compile_seconds": cs,
                 "reps_per_call": pc["reps"], "reps_scan": sc["reps"]})
  return rows


def markdown(rows: list[dict[str, Any]], info: dict[str, Any], steps: int) -> str:
  lines = _harness.markdown_header("DP online-to-batch: cost of one step", info)
  lines += [
      f"- d = {DIM}, batch = {BATCH}, logistic loss, OGD learner, rho = 1; in a scan: "
      f"{steps} steps per call, time / steps; compile time excluded (column 'compile s'); "
      "median of interleaved repetitions.",
      f"- criterion: conversion / non-private <= {SPEED_CRITERION:g} in a scan "
      "(the fused GLM path, every tree mode, exact node releases).",
      "",
      "| variant | per call ms | in scan ms / step | × non-private (per call) | "
      "× non-private (in scan) | compile s |",
      "|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(f"| {r['variant']} | {r['per_call_ms']:.3g} | {r['in_scan_ms']:.3g} | "
                 f"{r['ratio_per_call']:.2f} | {r['ratio_in_scan']:.2f} | "
                 f"{r['compile_seconds']:.2f} |")
  fused = [r for r in rows if "fused" in r["variant"] and "NOT private" not in r["variant"]]
  met = all(r["ratio_in_scan"] <= SPEED_CRITERION for r in fused)
  lines += ["", f"- fused GLM path within {SPEED_CRITERION:g}× in a scan: "
            f"**{'yes' if met else 'no'}** (worst {max(r['ratio_in_scan'] for r in fused):.2f}×)."]
  return "\n".join(lines) + "\n"


def rates(args: argparse.Namespace) -> int:
  """The rates experiment (``_rates``); ``--quick`` is a small smoke grid."""
  grid = (SMOKE_RATES_GRID if args.smoke else QUICK_RATES_GRID) if args.quick else {}
  info = _harness.machine_info()
  t0 = time.perf_counter()
  records = _rates.run(progress=lambda cells: _harness.progress(cells, desc="rates"), **grid)
  seconds = time.perf_counter() - t0
  summary = _rates.summarize(records)
  directory = _harness.out_dir(args)
  png = directory / f"{RATES_STEM}.png"
  _rates.plot(records, summary, png)
  lines = _harness.markdown_header("DP online-to-batch: excess population loss against n", info)
  lines += [f"- total wall time {seconds:.0f} s (compile included; per-cell compile and run "
            "seconds are in the JSON).", "- protocol: " + " ".join(
                _rates.__doc__.split("\n\n")[-2].split()), f"- plot: `{png.name}`"]
  lines += _rates.markdown(records, summary)
  payload = {"machine": info, "quick": bool(args.quick), "smoke": bool(args.smoke),
             "seconds": seconds,
             "grid": {k: list(v) if isinstance(v, tuple) else v for k, v in grid.items()},
             "records": records, "summary": summary}
  _, md = _harness.write_results(directory, RATES_STEM, payload, "\n".join(lines))
  print(md.read_text())
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--speed", action="store_true", help="measure the cost of one step")
  parser.add_argument("--rates", action="store_true",
                      help="the rates experiment (excess population loss against n)")
  parser.add_argument("--scan-steps", type=int, default=None, help="steps per scan (default 64; 8 with --quick)")
  parser.add_argument("--reps", type=int, default=None,
                      help="timed repetitions (default 200; 20 with --quick)")
  parser.add_argument("--smoke", action="store_true",
                      help="with --quick (the test suite's run): --speed times the non-private "
                      "step and the fused GLM path (buffered tree, exact noise) only; --rates "
                      "runs otb alone with one seed; every output is still written")
  args = _harness.parse_args(parser, argv)
  if args.speed == args.rates:
    parser.error("pass exactly one of --speed or --rates")
  if args.rates:
    return rates(args)
  steps = args.scan_steps or (8 if args.quick else 64)
  reps = args.reps or (20 if args.quick else 200)
  if steps < 1 or reps < 1:
    parser.error("--scan-steps and --reps must be >= 1")
  info = _harness.machine_info()
  rows = measure(steps, reps, args.smoke)
  payload = {"machine": info, "quick": bool(args.quick), "smoke": bool(args.smoke),
             "dim": DIM, "batch": BATCH,
             "scan_steps": steps, "reps": reps, "criterion": SPEED_CRITERION, "rows": rows}
  _, md = _harness.write_results(_harness.out_dir(args), STEM, payload,
                                 markdown(rows, info, steps))
  print(md.read_text())
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
