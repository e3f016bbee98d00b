"""The rates experiment of DP online-to-batch (Zhang, Tran & Cutkosky, NeurIPS 2022, arXiv:2210.06593).

A population with known optimum, sampled fresh inside the compiled pass (so
``n = 10^6`` single-pass runs need no stored data):

* ``x`` has i.i.d. Rademacher coordinates over ``sqrt(d)``: ``||x|| = 1``
  exactly and ``E[x x^T] = I / d``;
* ``w*`` has equal-magnitude coordinates with fixed random signs and ``||w*||
  = 0.5``, inside the ball of radius 1 every method is projected onto;
* least squares: ``y = <w*, x> + xi`` with ``xi ~ U[-0.5, 0.5]`` (so ``|y| <=
  1``, ``label_bound = 1``); the excess population loss is exactly ``||w -
  w*||^2 / (2d)``;
* logistic: ``P(y = 1 | x) = sigmoid(<w*, x>)``, so ``w*`` minimizes the
  population loss, and the excess is ``E_x KL(Bern(sigmoid(<w*, x>)) ||
  Bern(sigmoid(<w, x>)))``, averaged over a fixed test sample of ``2^15``
  points, in float64 (a non-negative average: a small relative error).

For each loss, ``d``, and ``n`` on a half-decade grid, every method runs one
pass of ``T = n / b`` steps at every epsilon (``delta = n^-1.1``, the exact
``"gaussian"`` conversion), 10 seeds, all in one ``jit`` of a ``vmap`` over
(epsilon, seed) lanes (and the step-size grid of the baselines). The
conversions use their public defaults (no tuning). The baselines' step is the
best of ``{4^-3, ..., 4^5} x`` their public default, chosen per cell on the same
runs: a non-private selection that favours the baselines.

Each seed draws its own data stream; all epsilons and methods of a seed see
the same stream (paired comparison). ``T`` in the tables is the number of
examples ``n`` (single pass, ``b`` per step); the slope against ``n`` is the
slope against the steps.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import accounting
from dpjax.training import streaming

LOSSES = ("least_squares", "logistic")
DIMS = (10, 100)
EPSILONS = (0.5, 1.0, 2.0, 8.0)
NS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
SEEDS = 10
BATCH = 10
METHODS = ("otb", "otb-optimistic", "otb-strongly-convex", "otb-parameter-free",
           "single-pass-dp-sgd", "dp-ftrl")
BASELINES = ("single-pass-dp-sgd", "dp-ftrl")
LR_MULTIPLIERS = tuple(4.0**j for j in range(-3, 6))  # 1/64 .. 1024
W_STAR_NORM = 0.5
NOISE_HALF_WIDTH = 0.5  # least squares: xi ~ U[-0.5, 0.5].
TEST_POINTS = 1 << 15
RADIUS = 1.0
SLOPE_RANGE = (-0.65, -0.35)  # at eps = 8: around the T^(-1/2) rate of the non-private term.
SLOPE_EPSILON, FAST_EPSILON = 8.0, 0.5


def w_star(d: int) -> np.ndarray:
  """The population optimum for dimension ``d`` (fixed, public): equal magnitudes, random signs."""
  signs = np.where(np.random.default_rng(1000 + d).random(d) < 0.5, -1.0, 1.0)
  return W_STAR_NORM * signs / math.sqrt(d)


def rademacher(key: jax.Array, rows: int, d: int, dtype=jnp.float32) -> jax.Array:
  """``[rows, d]`` i.i.d. ``+-1``: 32 signs from each random word."""
  words = -(-d // 32)
  bits = jax.random.bits(key, (rows, words), jnp.uint32)
  shifts = jnp.arange(32, dtype=jnp.uint32)
  signs = ((bits[:, :, None] >> shifts) & 1).reshape(rows, words * 32)[:, :d]
  return 2.0 * signs.astype(dtype) - 1.0


def features(key: jax.Array, rows: int, d: int, dtype=jnp.float32) -> jax.Array:
  """``x = s / sqrt(d)``, ``s`` Rademacher: ``||x|| = 1`` and ``E[x x^T] = I / d``."""
  return rademacher(key, rows, d, dtype) / math.sqrt(d)


def sampler(loss: str, d: int, b: int):
  """``sample(key, t) -> (x [b, d], y [b])``: batch ``t`` of a seed's stream."""
  w = jnp.asarray(w_star(d), jnp.float32)

  def sample(key, t):
    kx, ky = jax.random.split(jax.random.fold_in(key, t))
    x = features(kx, b, d)
    m = x @ w
    u = jax.random.uniform(ky, (b,))
    if loss == "least_squares":
      return x, m + NOISE_HALF_WIDTH * (2.0 * u - 1.0)
    return x, jnp.where(u < jax.nn.sigmoid(m), 1.0, -1.0)

  return sample


def test_points(d: int) -> np.ndarray:
  """The fixed test sample of the logistic excess loss (exact +-1/sqrt(d) entries), float64."""
  return np.asarray(features(jax.random.key(77 + d), TEST_POINTS, d), np.float64)


def excess_population_loss(loss: str, w: np.ndarray, d: int) -> np.ndarray:
  """Excess population loss of each row of ``w`` ``[..., d]`` (module docstring), float64."""
  w = np.asarray(w, np.float64)
  ws = w_star(d)
  if loss == "least_squares":
    return np.sum(np.square(w - ws), axis=-1) / (2.0 * d)
  x = test_points(d)
  flat = w.reshape(-1, d)
  m = x @ flat.T  # [N, r]
  ms = (x @ ws)[:, None]
  p = 1.0 / (1.0 + np.exp(-ms))
  kl = p * (np.logaddexp(0, -m) - np.logaddexp(0, -ms)) + (1 - p) * (
      np.logaddexp(0, m) - np.logaddexp(0, ms))
  return np.mean(kl, axis=0).reshape(w.shape[:-1])


def strong_convexity(loss: str, d: int) -> float:
  """A public lower bound on the population loss's strong convexity on the ball.

  ``E[x x^T] = I/d``; logistic curvature ``sigmoid'(m) >= sigmoid'(1)`` for
  ``|m| <= ||w|| ||x|| <= 1``.
  """
  lam = 1.0 / d
  if loss == "least_squares":
    return lam
  s = 1.0 / (1.0 + math.exp(-1.0))
  return s * (1.0 - s) * lam


def options(method: str, loss: str, d: int) -> dict[str, Any]:
  """The public options of a method (radius, label bound, mu)."""
  opts: dict[str, Any] = {"radius": RADIUS}
  if loss == "least_squares":
    opts["label_bound"] = W_STAR_NORM + NOISE_HALF_WIDTH
  if method == "otb-strongly-convex":
    opts["mu"] = strong_convexity(loss, d)
  return opts


def budget(n: int, eps: float) -> float:
  """rho at ``(eps, delta = n^-1.1)`` with the exact Gaussian conversion."""
  return accounting.epsilon_to_zcdp(eps, n ** -1.1, "gaussian")


def run_cell(loss: str, d: int, n: int, method: str, epsilons: Sequence[float], seeds: int,
             b: int = BATCH) -> dict[str, Any]:
  """One (loss, d, n, method): all epsilons x seeds (x step sizes) in one compiled call.

  Returns the outputs ``[eps, mult, seed, d]`` (``mult`` has length 1 for the
  conversions), the compile and run seconds.
  """
  steps = n // b
  rhos = np.asarray([budget(n, e) for e in epsilons], np.float32)
  mults = LR_MULTIPLIERS if method in BASELINES else (None,)
  opts = options(method, loss, d)
  sample = sampler(loss, d, b)

  def lane(rho, mult, seed_key):
    data_key, tx_key = jax.random.split(seed_key)
    extra = dict(opts)
    if mult is not None:
      extra["learning_rate"] = mult * streaming.baseline_learning_rate(
          method, d=d, batch_size=b, steps=steps, rho=rho, loss=loss, **opts)
    tx = streaming.make_transform(method, d=d, batch_size=b, steps=steps, rho=rho, loss=loss,
                                  key=tx_key, **extra)
    out, _, _, _ = streaming.scan_fit(tx, jnp.zeros((d,), jnp.float32), steps,
                                      lambda t: sample(data_key, t))
    return out

  seed_keys = jax.random.split(jax.random.key(2024), seeds)
  mult_arr = jnp.asarray([1.0 if m is None else m for m in mults], jnp.float32)
  use_mult = mults[0] is not None
  f = jax.vmap(lambda r: jax.vmap(lambda m: jax.vmap(
      lambda k: lane(r, m if use_mult else None, k))(seed_keys))(mult_arr))
  run = jax.jit(f)
  t0 = time.perf_counter()
  compiled = run.lower(jnp.asarray(rhos)).compile()
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  out = np.asarray(jax.block_until_ready(compiled(jnp.asarray(rhos))))
  run_s = time.perf_counter() - t0
  return {"params": out, "rhos": rhos.tolist(), "multipliers": [m for m in mults],
          "compile_seconds": compile_s, "run_seconds": run_s, "steps": steps}


# ----------------------------------------------------------------------------
# The experiment: run, summarize, report.
# ----------------------------------------------------------------------------


def run(*, losses: Sequence[str] = LOSSES, dims: Sequence[int] = DIMS, ns: Sequence[int] = NS,
        epsilons: Sequence[float] = EPSILONS, seeds: int = SEEDS,
        methods: Sequence[str] = METHODS, b: int = BATCH, progress=None) -> list[dict[str, Any]]:
  """Every (loss, d, n, method) cell; one record per (cell, epsilon, step multiplier)."""
  records = []
  cells = [(loss, d, n, m) for loss in losses for d in dims for n in ns for m in methods]
  for loss, d, n, method in (progress(cells) if progress else cells):
    out = run_cell(loss, d, n, method, epsilons, seeds, b)
    excess = excess_population_loss(loss, out["params"], d)  # [eps, mult, seed]
    for i, eps in enumerate(epsilons):
      for j, mult in enumerate(out["multipliers"]):
        records.append({
            "loss": loss, "d": d, "n": n, "steps": out["steps"], "batch": b, "method": method,
            "epsilon": eps, "delta": n ** -1.1, "rho": out["rhos"][i], "lr_multiplier": mult,
            "excess": excess[i, j].tolist(), "mean": float(excess[i, j].mean()),
            "se": float(excess[i, j].std(ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0,
            "compile_seconds": out["compile_seconds"], "run_seconds": out["run_seconds"]})
  return records


def best(records: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
  """(loss, d, n, method, eps) -> the record with the best step multiplier (non-private choice)."""
  out: dict[tuple, dict[str, Any]] = {}
  for r in records:
    key = (r["loss"], r["d"], r["n"], r["method"], r["epsilon"])
    if key not in out or r["mean"] < out[key]["mean"]:
      out[key] = r
  return out


def slope(ns: Sequence[int], means: Sequence[float]) -> float:
  """Least-squares slope of log(mean excess) against log(n)."""
  return float(np.polyfit(np.log(np.asarray(ns, float)), np.log(np.asarray(means, float)), 1)[0])


def decade_drops(ns: Sequence[int], means: Sequence[float]) -> list[tuple[int, float]]:
  """``(n, mean(n) / mean(10 n))`` for every ``n`` whose decade is on the grid."""
  pos = {n: m for n, m in zip(ns, means)}
  return [(n, pos[n] / pos[10 * n]) for n in ns if 10 * n in pos]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
  """Slopes of every (loss, d, method, eps) and the two rate criteria for ``otb``."""
  chosen = best(records)
  keys = sorted({(k[0], k[1], k[3], k[4]) for k in chosen})
  ns = sorted({k[2] for k in chosen})
  curves = []
  for loss, d, method, eps in keys:
    means = [chosen[(loss, d, n, method, eps)]["mean"] for n in ns]
    upper = len(ns) // 2  # the larger half of the grid: closer to the asymptotic rate
    curves.append({"loss": loss, "d": d, "method": method, "epsilon": eps, "ns": ns,
                   "means": means, "slope": slope(ns, means) if len(ns) > 1 else float("nan"),
                   "slope_upper": (slope(ns[upper:], means[upper:]) if len(ns) - upper > 1
                                   else float("nan")),
                   "decade_drops": decade_drops(ns, means)})
  criteria = []
  for c in curves:
    if c["method"] != "otb":
      continue
    if c["epsilon"] == SLOPE_EPSILON:
      criteria.append({"criterion": f"slope at eps={SLOPE_EPSILON:g} in {list(SLOPE_RANGE)}",
                       "loss": c["loss"], "d": c["d"], "value": c["slope"],
                       "upper_half": c["slope_upper"],
                       "met": SLOPE_RANGE[0] <= c["slope"] <= SLOPE_RANGE[1]})
    if c["epsilon"] == FAST_EPSILON:
      top = max((r for _, r in c["decade_drops"]), default=float("nan"))
      criteria.append({"criterion": f"eps={FAST_EPSILON:g}: some decade falls >= 10x "
                                    "(as fast as 1/(eps T))",
                       "loss": c["loss"], "d": c["d"], "value": top, "upper_half": None,
                       "met": bool(top >= 10.0)})
  return {"curves": curves, "criteria": criteria}


def markdown(records: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
  """The results tables (lines)."""
  chosen = best(records)
  eps_all = sorted({r["epsilon"] for r in records})
  ns = sorted({r["n"] for r in records})
  methods = [m for m in METHODS if any(r["method"] == m for r in records)]
  lines = ["", "## Criteria (otb: OGD learner, k = 1, public defaults)", "",
           "| criterion | loss | d | value (all n) | slope over the larger half of n | met |",
           "|---|---|---|---|---|---|"]
  for c in summary["criteria"]:
    upper = "-" if c["upper_half"] is None else f"{c['upper_half']:.3g}"
    lines.append(f"| {c['criterion']} | {c['loss']} | {c['d']} | {c['value']:.3g} | {upper} | "
                 f"{'yes' if c['met'] else '**no**'} |")
  for loss, d in sorted({(r["loss"], r["d"]) for r in records}):
    lines += ["", f"## {loss}, d = {d}: excess population loss of otb (mean ± s.e. over seeds)",
              "", "| n (= b T) | T | " + " | ".join(f"eps={e:g}" for e in eps_all) + " |",
              "|---" * (len(eps_all) + 2) + "|"]
    for n in ns:
      cells = [chosen.get((loss, d, n, "otb", e)) for e in eps_all]
      if any(c is None for c in cells):
        continue
      lines.append(f"| {n:,} | {cells[0]['steps']:,} | " + " | ".join(
          f"{c['mean']:.3g} ± {c['se']:.1g}" for c in cells) + " |")
    lines += ["", f"Slopes (log excess against log n, all n) and the largest n's excess, every "
              "method:", "", "| method | " + " | ".join(
                  f"slope eps={e:g} | n={ns[-1]:,} eps={e:g}" for e in eps_all) + " |",
              "|---" * (2 * len(eps_all) + 1) + "|"]
    for m in methods:
      row = []
      for e in eps_all:
        cur = next((c for c in summary["curves"] if (c["loss"], c["d"], c["method"],
                                                       c["epsilon"]) == (loss, d, m, e)), None)
        last = chosen.get((loss, d, ns[-1], m, e))
        row += [f"{cur['slope']:.2f}" if cur else "-",
                (f"{last['mean']:.3g}" + (f" (×{last['lr_multiplier']:g} lr)"
                                          if last["lr_multiplier"] else "")) if last else "-"]
      lines.append(f"| {m} | " + " | ".join(row) + " |")
  return lines


def plot(records: list[dict[str, Any]], summary: dict[str, Any], path) -> None:
  """Log-log excess against n: otb at every eps (with n^-1/2 and 1/n guides), then every method."""
  import _harness  # pylint: disable=g-import-not-at-top
  combos = sorted({(r["loss"], r["d"]) for r in records})
  eps_all = sorted({r["epsilon"] for r in records})
  compare = [e for e in (FAST_EPSILON, SLOPE_EPSILON) if e in eps_all] or eps_all[:1]
  k = len(combos) * (1 + len(compare))
  plt, fig, axes = _harness.panels(k, width=4.6, height=3.6)
  flat = list(axes.flat)
  i = 0
  for loss, d in combos:
    ax = flat[i]
    i += 1
    for c in summary["curves"]:
      if (c["loss"], c["d"], c["method"]) == (loss, d, "otb"):
        ax.plot(c["ns"], c["means"], marker="o", label=f"eps={c['epsilon']:g}")
        ref = c
    ns = np.asarray(ref["ns"], float)
    top = max(max(c["means"]) for c in summary["curves"] if (c["loss"], c["d"]) == (loss, d))
    ax.axhline(float(excess_population_loss(loss, np.zeros(d), d)), color="gray", lw=0.8,
               label="output w = 0")
    ax.plot(ns, top * (ns / ns[0]) ** -0.5, "k--", lw=0.8, label="∝ n^-1/2")
    ax.plot(ns, top * (ns / ns[0]) ** -1.0, "k:", lw=0.8, label="∝ 1/n")
    _harness.log_log_panel(ax, f"otb: {loss}, d={d}", "n = b T (single pass)", "excess pop. loss")
    ax.legend(fontsize=7)
    for e in compare:
      ax = flat[i]
      i += 1
      for c in summary["curves"]:
        if (c["loss"], c["d"], c["epsilon"]) == (loss, d, e):
          ax.plot(c["ns"], c["means"], marker=".", label=c["method"])
      _harness.log_log_panel(ax, f"{loss}, d={d}, eps={e:g}", "n", "excess pop. loss")
      ax.legend(fontsize=6)
  _harness.hide_unused(axes, k)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)
