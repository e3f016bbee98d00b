"""The ``dpjax`` command line (``python -m dpjax`` or the ``dpjax`` script).

Subcommands:

* ``demo``: runs on the built-in synthetic data with no arguments and prints
  a summary of the foundation layer: the data contract, the exact
  non-private optimum, the fused curvature pass and the privacy budget under
  each accounting method.

Bad arguments print a one-line error and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np

__all__ = ["main"]

_DEMO_EPSILONS = (0.1, 1.0, 10.0)


class _ArgumentParser(argparse.ArgumentParser):
  """An ArgumentParser whose errors are one line and exit with status 2."""

  def error(self, message: str) -> None:  # type: ignore[override]
    self.exit(2, f"{self.prog}: error: {message}\n")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
  fmt = lambda row: "| " + " | ".join(str(c).rjust(w) for c, w in zip(row, widths)) + " |"
  rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
  return "\n".join([fmt(header), rule] + [fmt(r) for r in rows])


def _demo(args: argparse.Namespace) -> int:
  import jax
  import jax.numpy as jnp

  from dpjax import accounting, data, glm, solve, spectral

  steps = [
      "generate synthetic data",
      "exact optimum",
      "fused curvature",
      "privacy budgets",
  ]

  def progress(i: int) -> None:
    bar = "#" * i + "." * (len(steps) - i)
    label = steps[i] if i < len(steps) else "done"
    print(f"\r[{bar}] {label:<24}", end="" if i < len(steps) else "\n", flush=True, file=sys.stderr)

  progress(0)
  ds = data.synthetic(args.seed, n=args.n, d=args.d)
  data.validate_dataset(ds)
  n, d = ds.x.shape
  norms = np.linalg.norm(ds.x.astype(np.float64), axis=1)
  positives = int(np.sum(ds.y == 1))

  progress(1)
  t0 = time.perf_counter()
  w_star, loss_star = solve.logistic_optimum(ds.x, ds.y)
  t_opt = time.perf_counter() - t0

  progress(2)
  fused = jax.jit(glm.logistic_grad_and_curvature, static_argnames="curvature")
  x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
  w0 = jnp.zeros(d, x.dtype)
  t0 = time.perf_counter()
  jax.block_until_ready(fused(w0, x, y, curvature="hessian"))
  t_compile = time.perf_counter() - t0
  t0 = time.perf_counter()
  loss0, grad0, hess0 = jax.block_until_ready(fused(w0, x, y, curvature="hessian"))
  t_run = time.perf_counter() - t0
  evals = np.linalg.eigvalsh(np.asarray(hess0, np.float64))
  newton = spectral.modified_solve(hess0, grad0, 1.0 / n, "clip")
  loss1 = float(glm.logistic_loss(w0 - newton, x, y))

  progress(3)
  delta = 1.0 / n**2
  rows = []
  for eps in _DEMO_EPSILONS:
    rhos = [accounting.epsilon_to_zcdp(eps, delta, m) for m in accounting.METHODS]
    rows.append([f"{eps:g}"] + [f"{r:.4e}" for r in rhos])
  sigma_rows = []
  for eps in _DEMO_EPSILONS:
    rho = accounting.epsilon_to_zcdp(eps, delta, "gaussian")
    sigma_rows.append(
        [f"{eps:g}"]
        + [f"{accounting.gaussian_sigma(1.0 / n, rho / t):.3e}" for t in (10, 100, 1000)]
    )
  progress(len(steps))

  print(f"dpjax demo: the foundation layer on synthetic(seed={args.seed}, n={n}, d={d})")
  print("(the private optimizers arrive in the next release; this run shows their building blocks)\n")
  print(
      f"data      : n={n}, d={d}, labels +1/-1 = {positives}/{n - positives}, "
      f"row norms in [{norms.min():.6f}, {norms.max():.6f}] (contract: <= 1)"
  )
  print(
      f"optimum   : loss* = {loss_star:.8f}, ||w*|| = {np.linalg.norm(w_star):.4f} "
      f"(float64 Newton, {t_opt:.2f} s); loss(0) = {float(loss0):.6f}"
  )
  print(
      f"curvature : fused loss+grad+Hessian at w=0 in {1e3 * t_run:.2f} ms "
      f"(compile {t_compile:.2f} s); Hessian spectrum [{evals.min():.2e}, {evals.max():.2e}]"
  )
  print(
      f"newton    : one non-private clipped Newton step from 0 (lam=1/n) gives loss "
      f"{loss1:.6f}, excess {loss1 - loss_star:.2e}\n"
  )
  print(f"zCDP rho for (eps, delta = n^-2 = {delta:.0e}) under each conversion:")
  print(_table(["eps"] + list(accounting.METHODS), rows))
  print(
      "\nper-step Gaussian noise std on the mean gradient (sensitivity 1/n), "
      "budget split evenly over T steps, 'gaussian' accounting:"
  )
  print(_table(["eps", "T=10", "T=100", "T=1000"], sigma_rows))
  return 0


def _build_parser() -> argparse.ArgumentParser:
  parser = _ArgumentParser(
      prog="dpjax", description="Differentially private convex optimisation in JAX."
  )
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
  sub.required = True
  demo = sub.add_parser("demo", help="run the built-in synthetic demo")
  demo.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
  demo.add_argument("--n", type=int, default=10_000, help="number of examples (default 10000)")
  demo.add_argument("--d", type=int, default=100, help="number of features (default 100)")
  demo.set_defaults(func=_demo)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Entry point of the ``dpjax`` command line; returns the exit status."""
  parser = _build_parser()
  args = parser.parse_args(argv)
  for name in ("n", "d"):
    if getattr(args, name, 1) < 1:
      parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  try:
    return args.func(args)
  except (ValueError, TypeError) as err:
    print(f"dpjax: error: {err}", file=sys.stderr)
    return 2
