"""Cost of one private optimizer step against the hardware-bound primitives.

Two measurements, each against a baseline timed in the same run (interleaved,
compile time excluded, see ``_harness``):

1. **Newton step vs Gram + matvec.** One double-noise Newton step
   (``dpjax.dp_newton``, Hessian curvature, eigenvalue clip, adaptive private
   lambda): the fused loss/gradient/Hessian pass, the noisy trace, one ``eigh``
   solve and both noises. Baseline: a plain Gram ``x.T @ x`` plus one matvec
   ``x @ w``, the least any method that forms the curvature must do.
   Target: <= 2x.
2. **Vmapped DP-GD repeats.** A whole DP-GD run (``lax.scan`` over T steps) for
   one repeat vs 16 repeats vmapped in one program. Target: <= 4x.

Usage::

  python benchmarks/steps.py [--data-dir ../shared/data] [--reps 20] [--out benchmarks/results/steps.md]

Datasets: ``a1a.t`` and ``w8a`` from ``--data-dir`` (skipped with a note when
absent) and the covertype-sized synthetic problem (n=581,012, d=54).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import data, glm  # noqa: E402  pylint: disable=g-import-not-at-top

_REPO = pathlib.Path(__file__).resolve().parents[1]


def _datasets(data_dir: pathlib.Path):
  """Yields (name, Dataset) in float32; real files are skipped when absent."""
  for name, fname, k in (("a1a.t", "a1a.t.bz2", 123), ("w8a", "w8a.bz2", 300)):
    path = data_dir / fname
    if path.exists():
      yield name, data.load_libsvm(path, n_features=k)
    else:
      print(f"note: {path} not found; {name} skipped", file=sys.stderr)
  yield "covertype-sized synthetic", data.synthetic(0, n=581_012, d=54)


def newton_vs_gram(ds, reps: int) -> dict:
  x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
  n, d = x.shape
  tx = dpjax.dp_newton(n=n, rho_per_step=1e-3, curvature="hessian", modification="clip",
                       min_eigenvalue="adaptive", key=0)
  w0 = jnp.zeros(d, x.dtype)
  state0 = tx.init(w0)

  @jax.jit
  def newton_step(w, state, x, y):
    out = glm.logistic_grad_and_curvature(w, x, y, "hessian")
    updates, state = tx.update(out.grad, state, w, curvature_matrix=out.matrix)
    return optax.apply_updates(w, updates), state

  @jax.jit
  def gram_matvec(w, x):
    return x.T @ x, x @ w

  step_c, step_compile = _harness.compile_fn(newton_step, w0, state0, x, y)
  base_c, base_compile = _harness.compile_fn(gram_matvec, w0, x)
  step_t, base_t = _harness.time_interleaved(
      [step_c, base_c], [(w0, state0, x, y), (w0, x)], reps=reps)
  return {
      "n": n, "d": d,
      "newton_ms": step_t["median_ms"], "newton_min_ms": step_t["min_ms"],
      "baseline_ms": base_t["median_ms"], "baseline_min_ms": base_t["min_ms"],
      "ratio": step_t["median_ms"] / base_t["median_ms"],
      "compile_newton_s": step_compile, "compile_baseline_s": base_compile,
  }


def dpgd_repeats(ds, reps: int, steps: int = 100, repeats: int = 16) -> dict:
  x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
  n, d = x.shape

  def run(key):
    tx = dpjax.dp_gd(n=n, rho=0.01, steps=steps, key=key)
    w0 = jnp.zeros(d, x.dtype)

    def body(carry, _):
      w, state = carry
      _, grad = glm.logistic_loss_and_grad(w, x, y)
      updates, state = tx.update(grad, state, w)
      return (optax.apply_updates(w, updates), state), None

    (w, _), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps)
    return w

  one = jax.jit(run)
  many = jax.jit(jax.vmap(run))
  key1 = jax.random.key(0)
  keys = jax.random.split(jax.random.key(1), repeats)
  one_c, one_compile = _harness.compile_fn(one, key1)
  many_c, many_compile = _harness.compile_fn(many, keys)
  one_t, many_t = _harness.time_interleaved([one_c, many_c], [(key1,), (keys,)], reps=reps)
  return {
      "steps": steps, "repeats": repeats,
      "one_ms": one_t["median_ms"], "many_ms": many_t["median_ms"],
      "ratio": many_t["median_ms"] / one_t["median_ms"],
      "compile_one_s": one_compile, "compile_many_s": many_compile,
  }


def to_markdown(info: dict, rows: list[dict]) -> str:
  lines = _harness.markdown_header("Private step cost vs hardware-bound primitives (float32)", info) + [
      "- times in ms, median (min) over interleaved reps after warm-up; compile time excluded and listed separately.",
      "",
      "## Newton step (hess-clip, adaptive lambda) vs Gram `x.T @ x` + matvec `x @ w` (target <= 2x)",
      "",
      "| data | n | d | Newton step | Gram + matvec | ratio | compile Newton / baseline (s) |",
      "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    nv = r["newton"]
    lines.append(
        f"| {r['name']} | {nv['n']:,} | {nv['d']} | {nv['newton_ms']:.2f} ({nv['newton_min_ms']:.2f}) | "
        f"{nv['baseline_ms']:.2f} ({nv['baseline_min_ms']:.2f}) | **{nv['ratio']:.2f}** | "
        f"{nv['compile_newton_s']:.2f} / {nv['compile_baseline_s']:.2f} |")
  lines += [
      "",
      "## DP-GD run, 16 vmapped repeats vs 1 repeat (same T; target <= 4x)",
      "",
      "| data | T | 1 repeat (ms) | 16 repeats (ms) | ratio | compile 1 / 16 (s) |",
      "|---|---|---|---|---|---|",
  ]
  for r in rows:
    g = r["dpgd"]
    lines.append(
        f"| {r['name']} | {g['steps']} | {g['one_ms']:.1f} | {g['many_ms']:.1f} | **{g['ratio']:.2f}** | "
        f"{g['compile_one_s']:.2f} / {g['compile_many_s']:.2f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data-dir", type=pathlib.Path, default=_REPO.parent / "shared" / "data")
  parser.add_argument("--reps", type=int, default=20)
  parser.add_argument("--out", type=pathlib.Path, default=_REPO / "benchmarks" / "results" / "steps.md")
  args = parser.parse_args(argv)
  info = _harness.machine_info()
  rows = []
  for name, ds in _datasets(args.data_dir):
    print(f"[{len(rows) + 1}] {name}: n={ds.n}, d={ds.d}", file=sys.stderr, flush=True)
    rows.append({"name": name, "newton": newton_vs_gram(ds, args.reps),
                 "dpgd": dpgd_repeats(ds, max(3, args.reps // 4))})
  info["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
  md = to_markdown(info, rows)
  print(md)
  args.out.parent.mkdir(parents=True, exist_ok=True)
  args.out.write_text(md)
  args.out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=2))
  print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
