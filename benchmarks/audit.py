"""Empirical privacy audits of every shipped mechanism and channel, with broken twins.

Usage::

  python benchmarks/audit.py [--quick] [--num-samples N] [--host-samples M]
                             [--mechanisms a,b] [--out-dir DIR]

For each entry of :data:`dpjax.audit.mechanisms.MECHANISMS` (mechanism,
channel, canary, statistic and claim are described there), runs the shipped
mechanism ``N`` times on each of two neighbouring datasets (default ``N =
100,000``; the host mechanisms, AOP and the estimator, ``M = 20,000``),
bounds epsilon from below with Clopper-Pearson 95% intervals on a held-out
half of the runs (:func:`dpjax.audit.empirical_epsilon` with
``holdout=True``) at the audit's delta, and does the same for each broken
twin of :data:`dpjax.audit.mechanisms.CONTROLS` (half the noise; the
canary's contribution doubled; the zero-out noise on a replace-one pair; the
tree's fresh noise; AOP's noise/10). A correct mechanism passes when its
bound is ``<=`` its claim, a twin when its bound is above it. ``--quick``
uses the default test suite's counts (:data:`dpjax.audit.mechanisms.TEST_SAMPLES`)
and writes under ``benchmarks/results/quick``. Compilation (or a host
warm-up run) is timed apart from the runs. Writes ``audit.{json,md}`` under
``--out-dir`` (default ``benchmarks/results``). Exit status 1 when any audit
fails, or when an entry cannot run its correct configuration in this version
(a replace-one entry whose transform has no ``neighbouring=`` option yet).
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
NUM_SAMPLES = mechanisms.NUM_SAMPLES
HOST_SAMPLES = 20_000  # AOP and the estimator run on the host, one eager call per run.


def _row(r: mechanisms.AuditResult, setup: mechanisms.AuditSetup, samples: int) -> dict:
  lb = r.lower_bound
  return dict(mechanism=r.name, twin=r.twin, channel=setup.channel, relation=setup.relation,
              transform=setup.mechanism, canary=setup.canary, statistic=setup.statistic,
              claimed_epsilon=r.claimed_epsilon, delta=r.delta, lower_bound=lb.epsilon,
              threshold=lb.threshold, region=lb.region, direction=lb.direction,
              p_numerator=lb.p_numerator, p_denominator=lb.p_denominator,
              num_samples=samples, evaluated_samples=list(lb.num_samples),
              passed=r.passed, compile_seconds=r.compile_seconds, seconds=r.seconds)


def _pending_row(name: str, reason: str, samples: int) -> dict:
  return dict(mechanism=name, twin=None, pending=reason, num_samples=samples, passed=False)


def samples_for(name: str, num_samples: int | None, host_samples: int | None,
                quick: bool) -> int:
  """The runs per neighbour of ``name``: the test suite's count with ``quick``."""
  if quick:
    return mechanisms.TEST_SAMPLES.get(name, mechanisms.TEST_SAMPLES_DEFAULT)
  if mechanisms.runs_on_host(name):
    return host_samples or HOST_SAMPLES
  return num_samples or NUM_SAMPLES


def run(names, *, num_samples: int | None, host_samples: int | None, quick: bool,
        progress: bool) -> list[dict]:
  rows = []
  for name in (_harness.progress(names, desc="audits") if progress else names):
    samples = samples_for(name, num_samples, host_samples, quick)
    try:
      mechanisms.make_setup(name)
    except ValueError as err:  # a replace-one entry before its transform has the option.
      rows.append(_pending_row(name, str(err), samples))
      for twin in mechanisms.CONTROLS[name]:
        try:
          setup = mechanisms.make_setup(name, twin=twin)
        except ValueError:
          continue
        rows.append(_row(mechanisms.run_audit(setup, num_samples=samples, seed=0), setup, samples))
      continue
    # Seed 0, named: the audits run on synthetic canaries, not private data, and the
    # committed table must reproduce (the library's default would draw a fresh seed).
    results = mechanisms.audit(name, num_samples=samples, seed=0)
    for r in results:
      rows.append(_row(r, mechanisms.make_setup(name, twin=r.twin), samples))
  return rows


_TWIN_COLUMNS = ("noise/2", "2x-sensitivity")


def to_markdown(info, rows, quick: bool) -> str:
  lines = _harness.markdown_header("Privacy audits" + (" (quick)" if quick else ""), info)
  lines += [
      "", "Empirical epsilon lower bounds (Clopper-Pearson 95%, the threshold chosen on one "
      "half of the runs and evaluated on the other) against each run's claim, the epsilon its "
      "own accountant reports at the audit's delta (0.1 for the zCDP and RDP accountants, "
      "whose claims hold at every delta; AOP's stated (2, 1e-5)). A correct run passes when "
      "its bound is <= the claim; each broken twin (noise/2: every release adds half its "
      "noise, the accountant unchanged; 2x sensitivity: the canary's contribution to every "
      "released sum doubled; zero-out noise: the default calibration on a replace-one pair; "
      "fresh tree noise; AOP's noise/10) passes when its bound exceeds the claim. `runs`: per "
      "neighbour; compile and run seconds are apart.", "",
      "| entry | channel | relation | claimed eps (delta) | correct | noise/2 | 2x sensitivity "
      "| other twin | runs | passed | compile s | run s |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  by: dict[str, dict] = {}
  for r in rows:
    by.setdefault(r["mechanism"], {})[r["twin"]] = r
  for name, group in by.items():
    ok = group.get(None, {})
    pending = ok.get("pending")
    first = ok if not pending else next(v for k, v in group.items() if k is not None)
    other = [(k, v) for k, v in group.items() if k is not None and k not in _TWIN_COLUMNS]
    cells = [f"{group[t]['lower_bound']:.3f}" if t in group else "-" for t in _TWIN_COLUMNS]
    other_cell = "; ".join(f"{k}: {v['lower_bound']:.3f}" for k, v in other) or "-"
    correct = "pending" if pending else f"{ok['lower_bound']:.3f}"
    passed = "pending" if pending else (
        "yes" if all(v["passed"] for v in group.values()) else "NO")
    compile_s = sum(v.get("compile_seconds", 0.0) for v in group.values())
    run_s = sum(v.get("seconds", 0.0) for v in group.values())
    lines.append(
        f"| {name} | {first['channel']} | {first['relation']} | "
        f"{first['claimed_epsilon']:.4f} ({first['delta']:g}) | {correct} | {cells[0]} | "
        f"{cells[1]} | {other_cell} | {first['num_samples']:,} | {passed} | {compile_s:.1f} | "
        f"{run_s:.1f} |")
  pending = [(name, g[None]["pending"]) for name, g in by.items() if g.get(None, {}).get("pending")]
  if pending:
    lines += ["", "Pending (the correct configuration does not run in this version):", ""]
    lines += [f"- {name}: {reason}" for name, reason in pending]
  lines += ["", "## What each entry runs", "", "| entry | mechanism | canary | statistic |",
            "|---|---|---|---|"]
  for name, group in by.items():
    first = next((v for v in group.values() if "transform" in v), None)
    if first is not None:
      lines.append(f"| {name} | `{first['transform']}` | {first['canary']} | "
                   f"{first['statistic']} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--num-samples", type=int, default=None,
                      help=f"runs per neighbour (default {NUM_SAMPLES}; quick: the test "
                           "suite's counts)")
  parser.add_argument("--host-samples", type=int, default=None,
                      help=f"runs per neighbour of the host mechanisms, AOP and the estimator "
                           f"(default {HOST_SAMPLES})")
  parser.add_argument("--mechanisms", default=None,
                      help=f"comma-separated subset of {sorted(mechanisms.MECHANISMS)}")
  args = parser.parse_args(argv)
  for flag in ("num_samples", "host_samples"):
    value = getattr(args, flag)
    if value is not None and value < 1000:
      parser.error(f"--{flag.replace('_', '-')} must be >= 1000")
  names = list(mechanisms.MECHANISMS) if args.mechanisms is None else args.mechanisms.split(",")
  unknown = sorted(set(names) - set(mechanisms.MECHANISMS))
  if unknown:
    parser.error(f"unknown mechanisms {unknown}; pick from {sorted(mechanisms.MECHANISMS)}")
  directory = _harness.out_dir(args)
  info = _harness.machine_info()
  t0 = time.perf_counter()
  rows = run(names, num_samples=args.num_samples, host_samples=args.host_samples,
             quick=args.quick, progress=not args.quick)
  payload = {"machine": info, "quick": bool(args.quick), "rows": rows,
             "elapsed_s": time.perf_counter() - t0}
  md = to_markdown(info, rows, args.quick)
  json_path, md_path = _harness.write_results(directory, STEM, payload, md)
  print(md)
  print(f"wrote {json_path} and {md_path}")
  return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
