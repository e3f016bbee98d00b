"""A fixed-seed fingerprint of every algorithm of ``dpjax.fit``, to show that a refactor changes no output.

Usage::

  python benchmarks/snapshot.py --write snapshot.json    # before the change
  python benchmarks/snapshot.py --check snapshot.json    # after: exit 1 on any difference

Each algorithm of :data:`dpjax.training.ALGORITHMS`, ``DRIVER_ALGORITHMS`` and
``STREAMING_ALGORITHMS`` (and ``"auto"``) runs once through :func:`dpjax.fit`
on the same small synthetic problem with an explicit seed (so the noise is
reproducible: a known seed voids the privacy guarantee, which is the point
here), two repeats, and its outputs are fingerprinted bit for bit: the SHA-256
of the released parameters' bytes, the excess losses as exact float64 hex
strings, the privacy spent and the reported flags. ``--check`` recomputes them
and lists every algorithm whose fingerprint moved.

The fingerprints are bitwise, so they compare two versions of the code on the
*same* machine and versions of jax/jaxlib (XLA's CPU code generation depends
on the processor): write before, check after, in one environment. The file is
therefore not committed as a fixture that CI compares against.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import training  # noqa: E402  pylint: disable=g-import-not-at-top

SEED = 20261202
N, D = 400, 5
EPSILON = 1.0

# Options an algorithm needs beyond the shared ones (small steps keep the run short).
_OPTIONS: dict[str, dict[str, Any]] = {
    "dp-sgd": {"steps": 6, "batch_size": 40},
    "newton-minibatch": {"steps": 4, "batch_size": 80, "curvature_batch_size": 80, "min_eigenvalue": 0.1},
    "cubic-newton": {"steps": 2, "mu": 0.05, "radius": 2.0},
    "aop": {},
    "damped-newton": {"steps": 4},
    "damped-newton-private": {"steps": 4},
    "dp-gd-oracle": {"steps": 6},
    "auto": {},
    "otb-strongly-convex": {"steps": 8, "batch_size": 40, "loss": "least_squares", "mu": 0.01,
                            "radius": 2.0},
}
_STREAM_OPTIONS = {"steps": 8, "batch_size": 40}
_FULL_OPTIONS = {"steps": 6}


def algorithms() -> list[str]:
  """Every algorithm name :func:`dpjax.fit` accepts, in a fixed order."""
  return [*training.ALGORITHMS, *training.DRIVER_ALGORITHMS, *training.STREAMING_ALGORITHMS,
          training.AUTO]


def _options(name: str) -> dict[str, Any]:
  if name in _OPTIONS:
    return dict(_OPTIONS[name])
  if name in training.STREAMING_ALGORITHMS:
    return dict(_STREAM_OPTIONS)
  return dict(_FULL_OPTIONS)


def _hex(values: Any) -> list[str]:
  return [float(v).hex() for v in np.ravel(np.asarray(values, np.float64))]


def fingerprint(name: str, data: Any) -> dict[str, Any]:
  """The bitwise fingerprint of one fixed-seed ``dpjax.fit`` run of ``name``."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # non-private baselines warn; the flags below record it.
    res = dpjax.fit(data, name, epsilon=EPSILON, repeats=2, seed=SEED, **_options(name))
  params = np.ascontiguousarray(np.asarray(res.params))
  return {
      "params_sha256": hashlib.sha256(params.tobytes()).hexdigest(),
      "params_dtype": str(params.dtype),
      "params_shape": list(params.shape),
      "losses_sha256": hashlib.sha256(np.ascontiguousarray(np.asarray(res.losses)).tobytes()).hexdigest(),
      "excess_losses": _hex(res.excess_losses),
      "rho_spent": _hex(res.rho_spent) if res.rho_spent is not None else None,
      "rho": None if res.rho is None else float(res.rho).hex(),
      "epsilon": None if res.epsilon is None else float(res.epsilon).hex(),
      "steps": int(res.steps),
      "private": bool(res.private),
      "algorithm": res.algorithm,
  }


def snapshot(names: list[str]) -> dict[str, Any]:
  data = dpjax.synthetic(0, n=N, d=D)
  out = {}
  for name in _harness.progress(names, desc="snapshot"):
    out[name] = fingerprint(name, data)
  return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
  """One line per algorithm whose fingerprint differs (or is missing on one side)."""
  lines = []
  for name in sorted(set(before) | set(after)):
    if name not in before or name not in after:
      lines.append(f"{name}: only in {'after' if name not in before else 'before'}")
      continue
    moved = [k for k in sorted(set(before[name]) | set(after[name]))
             if before[name].get(k) != after[name].get(k)]
    if moved:
      lines.append(f"{name}: {', '.join(moved)} differ")
  return lines


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  group = parser.add_mutually_exclusive_group(required=True)
  group.add_argument("--write", type=pathlib.Path, help="write the fingerprints to this JSON file")
  group.add_argument("--check", type=pathlib.Path, help="compare with this JSON file; exit 1 on a difference")
  parser.add_argument("--only", nargs="+", choices=algorithms(), help="fingerprint these algorithms only")
  args = parser.parse_args(argv)
  names = args.only or algorithms()
  current = snapshot(names)
  record = {"machine": _harness.machine_info(), "seed": SEED, "n": N, "d": D, "epsilon": EPSILON,
            "fingerprints": current}
  if args.write:
    args.write.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(current)} fingerprints to {args.write}")
    return 0
  before = json.loads(args.check.read_text())["fingerprints"]
  if args.only:
    before = {k: v for k, v in before.items() if k in names}
  diff = compare(before, current)
  for line in diff:
    print(line)
  print(f"{len(current) - len([d for d in diff if not d.endswith('only in before')])} of "
        f"{len(current)} algorithms bit-identical" if diff else
        f"all {len(current)} algorithms bit-identical to {args.check}")
  return 1 if diff else 0


if __name__ == "__main__":
  sys.exit(main())
