"""Cost of the fused logistic loss + gradient + Hessian versus a plain Gram.

Usage::

  python benchmarks/curvature.py [--reps R] [--out benchmarks/results/curvature.md]

For two dataset shapes (covertype-sized n=581,012, d=54 and a1a.t-sized
n=30,956, d=124; synthetic float32 rows of norm <= 1) it times

* fused:    ``jit(dpjax.problem.glm.logistic_grad_and_curvature)`` (curvature="hessian"),
* gram:     ``jit(lambda x: x.T @ x)``, the cheapest possible d x d pass over x,
* textbook: ``jit`` of loss + ``r @ x`` + ``(x * c[:, None]).T @ x``, for reference,

fused and gram interleaved round-robin (textbook alone afterwards, with a third
of the reps, since its large temporaries disturb the next call), compile time excluded (AOT-compiled first), after a
warm-up, with ``block_until_ready``. It prints and writes a markdown table and
a JSON file with the machine (CPU, cores, load average) and versions.
Target (the double-noise Newton method forms one SOI per step): fused <= 1.5x gram at the
covertype size.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

from dpjax.problem import glm  # noqa: E402  pylint: disable=g-import-not-at-top

SIZES = ((581_012, 54, "covertype-sized"), (30_956, 124, "a1a.t-sized"))


def synthetic(n: int, d: int, seed: int = 0):
  """Float32 rows of norm <= 1 and labels from a noisy linear model."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, d), dtype=np.float32)
  x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1).astype(np.float32) * 2
  w_true = rng.standard_normal(d).astype(np.float32) * 4
  y = np.where(x @ w_true + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0).astype(np.float32)
  w = (0.5 * rng.standard_normal(d)).astype(np.float32)
  return jnp.asarray(w), jnp.asarray(x), jnp.asarray(y)


def textbook(w, x, y):
  z = x @ w
  m = y * z
  loss = jnp.mean(jnp.logaddexp(0.0, -m))
  grad = (-y * jax.nn.sigmoid(-m)) @ x / x.shape[0]
  c = jax.nn.sigmoid(z) * jax.nn.sigmoid(-z)
  return loss, grad, (x * c[:, None]).T @ x / x.shape[0]


def run(reps: int, chunk_size: int | None):
  fused = jax.jit(
      lambda w, x, y: glm.logistic_grad_and_curvature(
          w, x, y, "hessian", chunk_size=chunk_size
      )
  )
  gram = jax.jit(lambda x: x.T @ x)
  rows = []
  for n, d, label in SIZES:
    w, x, y = synthetic(n, d)
    load_before = [round(v, 2) for v in os.getloadavg()]
    f_c, f_compile = _harness.compile_fn(fused, w, x, y)
    g_c, g_compile = _harness.compile_fn(gram, x)
    t_c, _ = _harness.compile_fn(jax.jit(textbook), w, x, y)
    # Sanity: the fused result equals the textbook one.
    ref = t_c(w, x, y)
    got = f_c(w, x, y)
    err = float(jnp.max(jnp.abs(got.matrix - ref[2])) / jnp.max(jnp.abs(ref[2])))
    # The textbook variant allocates and frees n x d buffers, which slows down
    # whatever runs right after it; so it is timed on its own, afterwards.
    f_t, g_t = _harness.time_interleaved([f_c, g_c], [(w, x, y), (x,)], reps)
    (t_t,) = _harness.time_interleaved([t_c], [(w, x, y)], max(3, reps // 3))
    rows.append({
        "dataset": label, "n": n, "d": d,
        "fused_median_ms": f_t["median_ms"], "fused_min_ms": f_t["min_ms"],
        "gram_median_ms": g_t["median_ms"], "gram_min_ms": g_t["min_ms"],
        "ratio_median": f_t["median_ms"] / g_t["median_ms"],
        "ratio_min": f_t["min_ms"] / g_t["min_ms"],
        "textbook_median_ms": t_t["median_ms"],
        "fused_compile_s": f_compile, "gram_compile_s": g_compile,
        "matrix_rel_err_vs_textbook": err,
        "load_before": load_before,
        "load_after": [round(v, 2) for v in os.getloadavg()],
    })
    del w, x, y
  return rows


def to_markdown(info, rows, reps) -> str:
  lines = _harness.markdown_header("Fused logistic grad + Hessian vs plain Gram (float32, XLA:CPU)", info) + [
      f"- fused and gram: {reps} interleaved reps after 2 warm-up rounds; textbook: "
      f"{max(3, reps // 3)} reps on its own; compile time excluded; times in ms as median (min).",
      "",
      "| data | n | d | fused | gram `x.T @ x` | fused/gram median (min) | textbook "
      "`(x*c).T@x` | compile fused / gram (s) | load before -> after |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
        f"| {r['dataset']} | {r['n']:,} | {r['d']} | {r['fused_median_ms']:.2f} "
        f"({r['fused_min_ms']:.2f}) | {r['gram_median_ms']:.2f} ({r['gram_min_ms']:.2f}) | "
        f"**{r['ratio_median']:.2f}** ({r['ratio_min']:.2f}) | {r['textbook_median_ms']:.2f} | "
        f"{r['fused_compile_s']:.2f} / {r['gram_compile_s']:.2f} | "
        f"{r['load_before']} -> {r['load_after']} |"
    )
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reps", type=int, default=20)
  parser.add_argument("--out", default="benchmarks/results/curvature.md")
  parser.add_argument("--chunk-size", type=int, default=None,
                      help="rows per block of the fused path (default: automatic)")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error("--reps must be >= 1")
  info = _harness.machine_info()
  rows = run(args.reps, args.chunk_size)
  md = to_markdown(info, rows, args.reps)
  print(md)
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(md)
  out.with_suffix(".json").write_text(
      json.dumps({"machine": info, "reps": args.reps, "chunk_size": args.chunk_size,
                  "rows": rows}, indent=2)
  )
  print(f"wrote {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
  main()
