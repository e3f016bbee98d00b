"""The ``dpjax`` command line (``python -m dpjax`` or the ``dpjax`` script).

Subcommands:

* ``fit``: one private training run (:func:`dpjax.fit`) on a LIBSVM file
  (``dpjax.data.load_libsvm``: each row scaled on its own by default;
  ``--preprocess paper`` is the paper's non-private standardization;
  ``--standardize LOWER,UPPER`` a private one, :mod:`dpjax.mechanisms.standardize`,
  charged to the run's budget) or on the built-in ``synthetic`` data; prints
  a one-line summary, and can write a JSON record (``--json FILE``) and the
  excess loss against the step as an image (``--plot FILE``, needs
  matplotlib).
* ``demo``: no arguments needed. Compares DP-GD with the four double-noise
  Newton variants at eps in {0.1, 1, 10} on the built-in synthetic data and
  prints a table of excess loss (mean +- s.e.) and run time. The data is
  fixed (``--data-seed``, default 0); the noise is fresh by default, as in
  ``fit`` (``--seed`` makes the table reproducible).

Seeds: ``--seed`` defaults to a fresh key from OS entropy (``secrets``), the
private choice. A given seed reproduces the run bit for bit and is recorded in
``fit --json`` (``"seed"``, ``null`` when fresh), but a seed anyone else knows
voids the guarantee: the noise can be regenerated and subtracted.

Bad arguments print a one-line error and exit with status 2 (never a
traceback); this includes errors found by ``fit``'s own validation and
unreadable files. ``fit --json FILE`` and ``fit --plot FILE`` write to a
temporary file in FILE's folder and rename it onto FILE, so a failed run
leaves neither a partial FILE nor a temporary file behind. Both commands show
a progress bar on stderr (:mod:`dpjax.progress`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

from dpjax import _common
from dpjax.progress import ProgressBar

__all__ = ["main"]

_DEMO_EPSILONS = (0.1, 1.0, 10.0)
# Fixed in advance, never tuned on the data: choosing T by looking at the
# private runs' results would itself leak privacy. DP-GD T = 200 and Newton
# T = 8: where the authors' public reference code (tensorflow/privacy,
# research/dp_newton) reached its lowest excess loss in our runs of it on the
# paper's synthetic data at eps = 1. precond-gd: m = 40, the value a
# non-private tuning of m selected on synthetic data of this shape (n = 10^4,
# d = 100).
_DEMO_STEPS = {"dp-gd": 200, "precond-gd": 40, "hess-clip": 8, "hess-add": 8, "qu-clip": 8,
               "qu-add": 8}
_DEMO_REPEATS = 5

# Exactly these fields go to `fit --json` (a stable machine-readable record).
_JSON_FIELDS = (
    "algorithm", "epsilon", "delta", "rho", "accounting", "n", "d", "steps", "repeats",
    "excess_loss_mean", "excess_loss_se", "excess_losses", "loss_star", "seconds_compile",
    "seconds_run", "guard_resets", "average", "final_excess_losses", "gradient_evaluations",
    "curvature_evaluations", "options", "auto_reason", "batch_size", "loss", "private",
    "curvature_batch_size", "seed", "neighbouring",
)
# `seed` is the explicit --seed (null: a fresh key from OS entropy, nothing recorded).

# Command-line flag -> transform option of `fit` (passed only when given).
_OPTION_FLAGS = {
    "learning_rate": "--learning-rate",
    "kappa": "--kappa",
    "curvature_frac": "--curvature-frac",
    "refresh_every": "--refresh-every",
    "radius": "--radius",
    "label_bound": "--label-bound",
    "mu": "--mu",
    "k": "--k",
    "min_eigenvalue": "--min-eigenvalue",
    "clip_norm": "--clip-norm",
    "max_inner_steps": "--max-inner-steps",
}


class _ArgumentParser(argparse.ArgumentParser):
  """An ArgumentParser whose errors are one line and exit with status 2."""

  def error(self, message: str) -> None:  # type: ignore[override]
    self.exit(2, f"{self.prog}: error: {message}\n")


class _UsageError(Exception):
  """A bad combination of arguments found after parsing."""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
  fmt = lambda row: "| " + " | ".join(str(c).rjust(w) for c, w in zip(row, widths)) + " |"
  rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
  return "\n".join([fmt(header), rule] + [fmt(r) for r in rows])


def _load(args: argparse.Namespace):
  from dpjax import data

  if args.data == "synthetic":
    for flag, value in (("--n-features", args.n_features), ("--positive-label", args.positive_label)):
      if value is not None:
        raise _UsageError(f"{flag} applies to LIBSVM files only, not to --data synthetic")
    return data.synthetic(args.data_seed), f"synthetic(seed={args.data_seed})"
  if not os.path.isfile(args.data):
    raise _UsageError(f"--data {args.data!r}: no such file (pass a LIBSVM file or 'synthetic')")
  preprocess = {} if args.preprocess is None else {"preprocess": args.preprocess}
  if args.standardize is not None:  # the private standardization needs the raw features
    if args.preprocess not in (None, "none"):
      raise _UsageError(f"--standardize reads the raw features; remove --preprocess "
                        f"{args.preprocess}")
    preprocess = {"preprocess": "none"}
  ds = data.load_libsvm(
      args.data, n_features=args.n_features, positive_label=args.positive_label, **preprocess
  )
  return ds, os.path.basename(args.data)


def _standardizer(args: argparse.Namespace):
  """``--standardize LOWER,UPPER`` -> a ``dpjax.mechanisms.standardize.PrivateStandardizer`` (or None)."""
  if args.standardize is None:
    if args.standardize_share is not None:
      raise _UsageError("--standardize-share applies with --standardize LOWER,UPPER only")
    return None
  from dpjax.mechanisms import standardize

  try:
    lower, upper = (float(v) for v in args.standardize.split(","))
  except ValueError:
    raise _UsageError(f"--standardize {args.standardize!r}: expected LOWER,UPPER, the public "
                      "bounds of every feature, e.g. --standardize 0,1") from None
  share = {} if args.standardize_share is None else {"budget_share": args.standardize_share}
  return standardize.PrivateStandardizer(bounds=(lower, upper), **share)


def _fit(args: argparse.Namespace) -> int:
  if args.json is not None:  # Fail before the run, not after it.
    _check_output_path("--json", args.json)
  plot_format = _check_plot(args) if args.plot is not None else None
  outputs = [f for f in (args.json, args.plot) if f is not None]
  # Only on a terminal: logs and scripts get the one summary line (or one error line).
  bar = ProgressBar(2 + bool(outputs), "dpjax fit", only_tty=True)
  try:
    return _fit_run(args, bar, outputs, plot_format)
  except BaseException:
    bar.end_line()
    raise


def _fit_run(args: argparse.Namespace, bar: ProgressBar, outputs: list, plot_format) -> int:
  from dpjax import training as fit_lib

  bar.update(f"load {args.data if args.data == 'synthetic' else os.path.basename(args.data)}")
  if args.data == "synthetic" and args.preprocess is not None:
    raise _UsageError("--preprocess applies to LIBSVM files only, not to --data synthetic")
  standardizer = _standardizer(args)
  ds, name = _load(args)
  extra_std = {} if standardizer is None else {"standardize": standardizer}
  options = {k: getattr(args, k) for k in _OPTION_FLAGS if getattr(args, k) is not None}
  extra = {}
  if args.curvature_batch_size is not None:
    extra["curvature_batch_size"] = args.curvature_batch_size
  if args.loss_option:
    extra["loss_options"] = _loss_options(args.loss_option)
  bar.update(f"{args.algorithm}: optimum, compile, run")
  res = fit_lib.fit(
      ds, args.algorithm, epsilon=args.epsilon, rho=args.rho, delta=args.delta,
      steps=args.steps, repeats=args.repeats, seed=args.seed, accounting=args.accounting,
      init=args.init, average=args.average, batch_size=args.batch_size, loss=args.loss,
      neighbouring=args.neighbouring, **extra, **extra_std, **options,
  )
  if outputs:
    bar.update("write " + ", ".join(os.path.basename(f) for f in outputs))
  resets = int(res.guard_resets.sum())
  label = f"{res.algorithm} (chosen by auto)" if args.algorithm == fit_lib.AUTO else res.algorithm
  if res.algorithm in fit_lib.STREAMING_ALGORITHMS:
    label += f" ({res.loss}, single pass, batch {res.batch_size})"
  elif res.batch_size:
    label += f" (Poisson batches of expected size {res.batch_size}"
    label += (f", curvature {res.curvature_batch_size})" if res.curvature_batch_size else ")")
  elif res.loss != "logistic":
    label += f" ({res.loss})"
  if not res.private:
    label += " [NOT PRIVATE: a non-private baseline]"
  if res.neighbouring != "zero-out":
    label += f" [{res.neighbouring} neighbours]"
  paper = args.preprocess == "paper" and args.data != "synthetic"
  if paper:
    label += " [NOT PRIVATE: paper preprocessing, columns standardized with the data's own stats]"
  if standardizer is not None:
    label += (f" + private standardization (rho {res.standardization.rho:.3g} of the total, "
              f"bounds {args.standardize})")
  rho_text = "n/a" if res.rho is None else f"{res.rho:.6g}"
  print(
      f"{label} on {name} (n={res.n}, d={res.d}): eps={res.epsilon:.4g} "
      f"delta={res.delta:.3g} rho={rho_text} ({res.accounting}), T={res.steps}, "
      f"output {res.average}, {res.repeats} repeats: excess loss {res.excess_loss_mean:.4g} +- "
      f"{res.excess_loss_se:.2g} (loss* {res.loss_star:.6f}); compile {res.seconds_compile:.2f} s, "
      f"run {res.seconds_run:.3f} s; guard resets {resets}; {_noise_text(res.seed)}"
  )
  if args.json is not None:
    record = {}
    for field in _JSON_FIELDS:
      value = getattr(res, field)
      record[field] = value.tolist() if hasattr(value, "tolist") else value
    if paper:
      record["private"] = False
    if standardizer is not None:
      record["standardization"] = {
          "rho": res.standardization.rho, "budget_share": standardizer.budget_share,
          "bounds": [float(v) for v in args.standardize.split(",")],
          "neighbouring": res.standardization.neighbouring}
    _write_json_atomic(args.json, record)
  if args.plot is not None:
    _common.write_atomic(args.plot,
                         lambda f: _loss_curve(res, name).savefig(f, format=plot_format))
  bar.close()
  return 0


def _noise_text(seed) -> str:
  """How the run's noise was drawn, for the report."""
  if seed is None:
    return "noise from fresh OS entropy"
  return f"noise seed {seed} (reproducible; private only while the seed stays secret)"


def _check_plot(args: argparse.Namespace) -> str:
  """Checks ``--plot FILE`` before the run; returns the image format."""
  _check_output_path("--plot", args.plot)
  try:
    from matplotlib.figure import Figure
  except ImportError:
    raise _UsageError("--plot needs matplotlib: pip install 'dpjax[plot]'") from None
  fmt = os.path.splitext(args.plot)[1].lstrip(".").lower()
  formats = Figure().canvas.get_supported_filetypes()
  if fmt not in formats:
    raise _UsageError(
        f"--plot {args.plot!r}: the file extension must name an image format, one of "
        f"{', '.join(sorted(formats))} (e.g. loss.png)"
    )
  if args.algorithm == "aop":
    raise _UsageError("--plot draws the loss at every step; aop takes no steps (drop --plot)")
  return fmt


def _loss_curve(res, name: str):
  """The loss-against-step figure of ``fit --plot``: excess loss at w_0 .. w_T."""
  import numpy as np
  from matplotlib.figure import Figure

  from dpjax.training import STREAMING_ALGORITHMS

  excess = np.asarray(res.losses, dtype=np.float64) - res.loss_star  # [repeats, T + 1]
  steps = np.arange(excess.shape[1])
  fig = Figure(figsize=(6.4, 4.2), dpi=100)
  ax = fig.add_subplot()
  if res.repeats <= 10:
    for row in excess:
      ax.plot(steps, row, color="tab:blue", alpha=0.25, linewidth=0.8)
  mean = excess.mean(axis=0)
  ax.plot(steps, mean, color="tab:blue", linewidth=1.8, label=f"mean of {res.repeats} repeat(s)")
  if res.average != "none":
    ax.axhline(res.excess_loss_mean, color="tab:red", linestyle="--", linewidth=1.2,
               label=f"output ({res.average} average): {res.excess_loss_mean:.3g}")
  positive = bool(np.all(excess > 0)) and res.excess_loss_mean > 0
  ax.set_yscale("log" if positive else "symlog", **({} if positive else {"linthresh": 1e-6}))
  ax.set_xlabel("step t")
  ylabel = "excess loss  L(w_t) - L(w*)"
  if res.algorithm in STREAMING_ALGORITHMS:
    ylabel = "excess loss (t < T: loss of batch t before step t; T: full data)"
  ax.set_ylabel(ylabel)
  ax.set_title(f"{res.algorithm} on {name}: eps={res.epsilon:.3g}, delta={res.delta:.2g}, "
               f"n={res.n}, d={res.d}", fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def _check_output_path(flag: str, path: str) -> None:
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise _UsageError(f"{flag} {path!r}: folder {folder!r} does not exist")
  if os.path.isdir(path):
    raise _UsageError(f"{flag} {path!r} is a folder; pass a file name")


def _write_json_atomic(path: str, record: dict) -> None:
  """Writes ``record`` as JSON to ``path`` all at once, or not at all."""
  _common.write_atomic(path, lambda f: f.write((json.dumps(record, indent=2) + "\n").encode()))


def _loss_options(items: Sequence[str]) -> dict:
  out = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or not key:
      raise _UsageError(f"--loss-option {item!r}: expected KEY=VALUE, e.g. delta=1.0")
    try:
      out[key] = float(value)
    except ValueError:
      raise _UsageError(f"--loss-option {item!r}: the value must be a number") from None
  return out


def _demo(args: argparse.Namespace) -> int:
  from dpjax import data, training as fit_lib

  ds = data.synthetic(args.data_seed, n=args.n, d=args.d)
  n, d = ds.x.shape
  epsilons = args.epsilons
  names = fit_lib.ALGORITHMS + (fit_lib.AUTO,)

  # One compiled program per algorithm serves every eps (dpjax.training.fit_levels: the budget
  # is a traced scalar); auto gets one program per distinct choice.
  bar = ProgressBar(len(names) + 1, "dpjax demo")
  t_start = time.perf_counter()
  bar.update("exact optimum")
  fit_lib.optimum_loss(ds.x, ds.y)
  results, seconds = {}, {}
  for alg in names:
    bar.update(f"{alg} at eps {', '.join(f'{e:g}' for e in epsilons)}")
    steps = {} if alg == fit_lib.AUTO else {"steps": _DEMO_STEPS[alg]}
    levels = fit_lib.fit_levels(ds, alg, epsilons=epsilons, repeats=args.repeats, seed=args.seed,
                                **steps)
    results.update({(alg, eps): r for eps, r in zip(epsilons, levels)})
    programs = {(r.algorithm, r.steps): (r.seconds_compile, r.seconds_run) for r in levels}
    seconds[alg] = tuple(map(sum, zip(*programs.values())))
  bar.close()
  total = time.perf_counter() - t_start
  compile_s = sum(c for c, _ in seconds.values())

  some = next(iter(results.values()))
  print(
      f"dpjax demo: DP-GD, precond-gd, the double-noise Newton variants and auto on "
      f"synthetic(seed={args.data_seed}, n={n}, d={d}); "
      f"{args.repeats} repeats from w0 = 0, delta = n^-2 = {some.delta:.0e}, "
      f"'{some.accounting}' accounting (exact for these Gaussian mechanisms); "
      f"{_noise_text(args.seed)}"
  )
  print(
      "T is fixed in advance (DP-GD 200 steps, precond-gd 40 steps with the last half averaged, "
      "Newton 8 steps, adaptive private lambda): tuning T on the results of private runs would "
      "itself leak privacy. These T suit eps ~ 1; at eps = 0.1 fewer steps would do better (the "
      "per-step noise grows with sqrt(T)). 'auto' picks the method and T from n, d and eps only "
      "(dpjax.training.auto), so it needs no tuning at all.\n"
  )
  header = ["algorithm", "T"] + [
      f"eps={e:g} (rho={results[fit_lib.ALGORITHMS[0], e].rho:.3g})" for e in epsilons
  ] + ["run time"]
  rows = []
  for alg in names:
    cells = []
    for eps in epsilons:
      r = results[alg, eps]
      chosen = f" ({r.algorithm}, T={r.steps})" if alg == fit_lib.AUTO else ""
      cells.append(f"{r.excess_loss_mean:.4f} ± {r.excess_loss_se:.4f}{chosen}")
    steps = "auto" if alg == fit_lib.AUTO else str(_DEMO_STEPS[alg])
    rows.append([alg, steps] + cells + [f"{seconds[alg][1]:.2f} s"])
  print(f"excess loss over the non-private optimum (mean ± s.e.); run time of all "
        f"{len(epsilons)} levels x {args.repeats} repeats, which run together in one program:")
  print(_table(header, rows))
  print(
      f"\nloss* = {some.loss_star:.6f} (float64 Newton). Run times exclude compilation "
      f"({compile_s:.1f} s in all); total {total:.1f} s."
  )
  return 0


def _positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
  return value


def _build_parser() -> argparse.ArgumentParser:
  from dpjax import accounting
  from dpjax.training import AVERAGES, INITS, STREAMING_ALGORITHMS, registry
  from dpjax.training.streaming import LOSSES
  from dpjax.problem.losses import LOSSES as GENERAL_LOSSES
  from dpjax.problem.minibatch import NEIGHBOURING

  parser = _ArgumentParser(
      prog="dpjax", description="Differentially private convex optimisation in JAX."
  )
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
  sub.required = True

  fit = sub.add_parser(
      "fit", help="one private run (repeated) on a LIBSVM file or the synthetic data",
      description="Runs dpjax.fit and prints a one-line summary.",
  )
  fit.add_argument("--data", required=True, metavar="PATH|synthetic",
                   help="LIBSVM file (plain, .gz or .bz2; each row scaled on its own, see "
                        "--preprocess) or 'synthetic' (dpjax.data.synthetic: n=10000, d=100)")
  fit.add_argument("--preprocess", choices=("per-row", "paper", "none"), default=None,
                   help="LIBSVM: per-row (default, private: [1, x/max(1, ||x||)]/sqrt(2)), paper "
                        "(the paper's column standardization: NOT PRIVATE, for reproducing the "
                        "paper) or none")
  fit.add_argument("--standardize", metavar="LOWER,UPPER", default=None,
                   help="private standardization (dpjax.mechanisms.standardize) of the raw features, with "
                        "these public bounds for every feature (values are clipped to them); "
                        "charged to the run's budget (a negative LOWER needs the = form: "
                        "--standardize=-1,1)")
  fit.add_argument("--standardize-share", type=float, default=None, dest="standardize_share",
                   help="--standardize: the share of the budget it spends (default 0.1)")
  fit.add_argument("--algorithm", required=True,
                   choices=registry.NAMES,
                   help="the method; 'auto' chooses a full-batch one and its steps and options "
                        "from n, d and the budget only (dpjax.training.auto; no tuning on the data); "
                        f"{', '.join(STREAMING_ALGORITHMS)} make one pass in minibatches of "
                        "--batch-size (dpjax.training.streaming); dp-sgd and newton-minibatch sample "
                        "Poisson batches of expected size --batch-size; damped-newton and "
                        "dp-gd-oracle are NOT private (baselines, dpjax.baselines)")
  budget = fit.add_mutually_exclusive_group(required=True)
  budget.add_argument("--epsilon", type=float, help="target epsilon (converted with --accounting)")
  budget.add_argument("--rho", type=float, help="total zCDP budget rho")
  fit.add_argument("--delta", type=float, default=None, help="delta (default n^-2)")
  fit.add_argument("--steps", type=int, default=None,
                   help="number of steps T (m for precond-gd); required unless --algorithm auto")
  fit.add_argument("--repeats", type=int, default=1, help="independent repeats (default 1)")
  fit.add_argument("--seed", type=int, default=None,
                   help=f"seed of the noise and init, an integer in [0, 2**{_common.SEED_BITS}): "
                        "the run then reproduces bit for bit and the seed is recorded in "
                        "--json, but anyone who knows it can regenerate and subtract the "
                        "noise, which voids the privacy guarantee (default: a fresh key from "
                        "OS entropy, the private choice)")
  fit.add_argument("--accounting", choices=accounting.METHODS, default="gaussian",
                   help="epsilon <-> rho conversion (default gaussian, exact here)")
  fit.add_argument("--neighbouring", choices=NEIGHBOURING, default="zero-out",
                   help="the neighbouring relation, n public: zero-out (default; one row "
                        "replaced by a null row) or replace-one (by any row; more noise). "
                        "dp-sgd and newton-minibatch: zero-out only")
  fit.add_argument("--init", choices=INITS, default="zeros", help="initial point (default zeros)")
  fit.add_argument("--average", choices=AVERAGES, default=None,
                   help="output: the final iterate (none) or the mean of the last half / "
                        "quarter of the iterates; free post-processing (default: last-half for "
                        "precond-gd, none otherwise)")
  fit.add_argument("--learning-rate", type=float, default=None, dest="learning_rate",
                   help="step size (dp-gd default 4 = 1/L1, safe up to 8 for logistic loss "
                        "with ||x|| <= 1; precond-gd default 1)")
  fit.add_argument("--kappa", type=float, default=None,
                   help="precond-gd: eigenvalue floor multiplier (default 3)")
  fit.add_argument("--curvature-frac", type=float, default=None, dest="curvature_frac",
                   help="precond-gd: share of the budget for the curvature release (default 0.03)")
  fit.add_argument("--refresh-every", type=int, default=None, dest="refresh_every",
                   help="precond-gd: release the curvature again every this many steps")
  fit.add_argument("--batch-size", type=int, default=None, dest="batch_size",
                   help="streaming algorithms: examples per step (required for them; --steps "
                        "defaults to n // batch size); dp-sgd, newton-minibatch: the expected "
                        "Poisson batch size (required)")
  fit.add_argument("--curvature-batch-size", type=int, default=None,
                   dest="curvature_batch_size",
                   help="newton-minibatch: expected size of the curvature sample (default "
                        "--batch-size)")
  fit.add_argument("--loss", choices=tuple(dict.fromkeys(LOSSES + GENERAL_LOSSES)),
                   default="logistic",
                   help="logistic (default); least_squares (streaming algorithms); "
                        "l2_logistic, pseudo_huber, poisson (dp-gd, hess-add, qu-add; "
                        "dpjax.problem.losses)")
  fit.add_argument("--loss-option", action="append", default=None, dest="loss_option",
                   metavar="KEY=VALUE",
                   help="a public parameter of a dpjax.problem.losses loss, e.g. regularization=1e-3, "
                        "delta=1.0, radius=1, label_bound=5 (repeatable)")
  fit.add_argument("--min-eigenvalue", type=float, default=None, dest="min_eigenvalue",
                   help="Newton: a fixed minimum eigenvalue lambda (required by "
                        "newton-minibatch and by Newton on a non-logistic loss; full-batch "
                        "logistic default: adaptive)")
  fit.add_argument("--clip-norm", type=float, default=None, dest="clip_norm",
                   help="dp-sgd and the streaming baselines: per-example clip norm")
  fit.add_argument("--max-inner-steps", type=int, default=None, dest="max_inner_steps",
                   help="cubic-newton: cap on the inner DPSolver steps (privacy unaffected)")
  fit.add_argument("--radius", type=float, default=None,
                   help="streaming algorithms: radius of the ball domain around 0 (default "
                        "1); cubic-newton: its ball domain (default 10)")
  fit.add_argument("--label-bound", type=float, default=None, dest="label_bound",
                   help="least squares: public bound on |y| (default 1)")
  fit.add_argument("--mu", type=float, default=None,
                   help="otb-strongly-convex: strong convexity of the population loss; "
                        "cubic-newton: the ridge mu of its L2-regularised logistic loss")
  fit.add_argument("--k", type=float, default=None,
                   help="online-to-batch weight exponent, beta_t = t^k (default 1; 3 for "
                        "otb-parameter-free)")
  fit.add_argument("--n-features", type=int, default=None,
                   help="LIBSVM: number of features (default: largest index in the file)")
  fit.add_argument("--positive-label", type=float, default=None,
                   help="LIBSVM: this label becomes +1, all others -1 (default: labels are +-1)")
  fit.add_argument("--data-seed", type=int, default=0,
                   help="seed of the synthetic data (default 0)")
  fit.add_argument("--json", metavar="FILE", default=None, help="write the result fields as JSON")
  fit.add_argument("--plot", metavar="FILE", default=None,
                   help="save the excess loss against the step as an image (FILE.png, .pdf, .svg; "
                        "needs matplotlib: pip install 'dpjax[plot]')")
  fit.set_defaults(func=_fit)

  demo = sub.add_parser("demo", help="compare DP-GD and the Newton variants on synthetic data")
  demo.add_argument("--seed", type=int, default=None,
                    help=f"seed of the noise, an integer in [0, 2**{_common.SEED_BITS}): the "
                         "table then reproduces bit for bit (a known seed voids the guarantee: "
                         "the noise can be regenerated and subtracted); default: fresh OS "
                         "entropy, so the excess losses vary within their standard errors "
                         "from run to run")
  demo.add_argument("--data-seed", type=int, default=0, dest="data_seed",
                    help="seed of the synthetic data (default 0: the same workload every run)")
  demo.add_argument("--n", type=_positive_int, default=10_000, help="number of examples (default 10000)")
  demo.add_argument("--d", type=_positive_int, default=100, help="number of features (default 100)")
  demo.add_argument("--repeats", type=_positive_int, default=_DEMO_REPEATS,
                    help=f"repeats per cell (default {_DEMO_REPEATS})")
  demo.add_argument("--epsilons", type=float, nargs="+", default=list(_DEMO_EPSILONS),
                    help=argparse.SUPPRESS)  # for quick tests
  demo.set_defaults(func=_demo)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Entry point of the ``dpjax`` command line; returns the exit status."""
  parser = _build_parser()
  args = parser.parse_args(argv)
  try:
    return args.func(args)
  except (_UsageError, ValueError, TypeError, OSError) as err:
    message = " ".join(str(err).split())
    print(f"dpjax {args.command}: error: {message}", file=sys.stderr)
    return 2
