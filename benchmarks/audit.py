"""Empirical privacy audits of every shipped mechanism, with deliberately broken controls.

Usage::

  python benchmarks/audit.py [--quick] [--num-samples N] [--mechanisms a,b] [--out-dir DIR]

For each mechanism of :data:`dpjax.audit.mechanisms.MECHANISMS` (the canaries,
statistics and claims are described there), runs the shipped mechanism
``N`` times on each of two neighbouring datasets (default ``N = 100,000``;
``--quick``: 20,000, the CI subset's size, and AOP with 2,000), computes the
empirical epsilon lower bound at ``delta = 1e-5`` over all thresholds with
Clopper-Pearson 95% intervals (:func:`dpjax.audit.empirical_epsilon`), and
does the same for the broken control of :data:`dpjax.audit.mechanisms.CONTROLS`
(every Gaussian draw scaled by 1/3, or 1/10 for AOP, or fresh tree noise per step). A correct mechanism must give a bound ``<=`` its
claim, a broken one a bound above it. Seconds include compilation (each
audit compiles its own program); they are not a speed benchmark. Writes
``audit.{json,md}`` under ``--out-dir`` (default ``benchmarks/results``;
``--quick``: ``benchmarks/results/quick``). Exit status 1 when any audit or
control fails.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import _harness  # noqa: E402

from dpjax.audit import mechanisms  # noqa: E402

STEM = "audit"
HOST_SAMPLES_QUICK = 2_000  # AOP runs on the host, one eager call per run.


def run(names, num_samples: int, host_samples: int, progress: bool) -> list[dict]:
  rows = []
  items = [(name, broken) for name in names
           for broken in (None, mechanisms.CONTROLS[name])]
  for name, broken in (_harness.progress(items, desc="audits") if progress else items):
    setup = mechanisms.make_setup(name, broken=broken)
    samples = host_samples if setup.host else num_samples
    r = mechanisms.run_audit(setup, num_samples=samples)
    lb = r.lower_bound
    rows.append(dict(mechanism=name, broken=broken, claimed_epsilon=r.claimed_epsilon,
                     delta=r.delta, lower_bound=lb.epsilon, threshold=lb.threshold,
                     region=lb.region, direction=lb.direction, p_numerator=lb.p_numerator,
                     p_denominator=lb.p_denominator, num_samples=samples,
                     passed=r.consistent if broken is None else not r.consistent,
                     seconds=r.seconds))
  return rows


def to_markdown(info, rows, quick: bool) -> str:
  lines = _harness.markdown_header("Privacy audits" + (" (quick)" if quick else ""), info)
  lines += ["", "Empirical epsilon lower bounds (Clopper-Pearson 95%, max over thresholds) at "
            "delta = 1e-5; runs per neighbour in the `runs` column. A correct mechanism passes "
            "when its bound is <= the claim; its broken control passes when the bound exceeds "
            "the claim (the audit detects the bug).", "",
            "| mechanism | claimed eps | lower bound | control | control lower bound | runs | "
            "passed | seconds |", "|---|---|---|---|---|---|---|---|"]
  by = {}
  for r in rows:
    by.setdefault(r["mechanism"], {})[r["broken"]] = r
  for name, pair in by.items():
    ok = pair[None]
    (control, bad), = [(k, v) for k, v in pair.items() if k is not None]
    lines.append(
        f"| {name} | {ok['claimed_epsilon']:.4f} | {ok['lower_bound']:.3f} | {control} | "
        f"{bad['lower_bound']:.3f} | {ok['num_samples']:,} | "
        f"{'yes' if ok['passed'] and bad['passed'] else 'NO'} | "
        f"{ok['seconds'] + bad['seconds']:.1f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--num-samples", type=int, default=None,
                      help="runs per neighbour (default 100000; quick 20000)")
  parser.add_argument("--host-samples", type=int, default=None,
                      help="runs per neighbour of the host mechanism AOP (default: "
                           "--num-samples; quick 2000)")
  parser.add_argument("--mechanisms", default=None,
                      help=f"comma-separated subset of {sorted(mechanisms.MECHANISMS)}")
  args = parser.parse_args(argv)
  num = args.num_samples or (20_000 if args.quick else 100_000)
  if num < 20_000:
    parser.error("--num-samples must be >= 20000 (the audit's minimum)")
  host = args.host_samples or (HOST_SAMPLES_QUICK if args.quick else num)
  names = list(mechanisms.MECHANISMS) if args.mechanisms is None else args.mechanisms.split(",")
  unknown = sorted(set(names) - set(mechanisms.MECHANISMS))
  if unknown:
    parser.error(f"unknown mechanisms {unknown}; pick from {sorted(mechanisms.MECHANISMS)}")
  directory = _harness.out_dir(args)
  info = _harness.machine_info()
  t0 = time.perf_counter()
  rows = run(names, num, host, progress=not args.quick)
  payload = {"machine": info, "quick": bool(args.quick), "rows": rows,
             "elapsed_s": time.perf_counter() - t0}
  md = to_markdown(info, rows, args.quick)
  json_path, md_path = _harness.write_results(directory, STEM, payload, md)
  print(md)
  print(f"wrote {json_path} and {md_path}")
  return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
