"""Running an audit: the batched runs on both neighbours and the held-out lower bound.

:func:`run_audit` runs one :class:`~dpjax.audit.core.AuditSetup`;
:func:`audit` runs an entry and its broken twins under the same keys and
checks (:func:`check_injection`) that each noise twin's bug reached the runs.
The bound is :func:`dpjax.audit.bounds.empirical_epsilon` (Jagielski, Ullman
& Oprea 2020, NeurIPS; Nasr, Song, Thakurta, Papernot & Carlini 2021, IEEE
S&P).
"""

from __future__ import annotations

import secrets
import time

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.audit import bounds
from dpjax.audit.core import NUM_SAMPLES, AuditResult, AuditSetup, injected_noise
from dpjax.audit.registry import _FACTORS, CONTROLS, make_setup

__all__ = ["audit", "check_injection", "run_audit"]


_CHUNK = 25_000  # runs per compiled call (bounds the memory of a vmap).


def run_audit(setup: AuditSetup, *, num_samples: int = NUM_SAMPLES, seed: int | None = None,
              confidence: float = 0.95) -> AuditResult:
  """Runs ``setup`` ``num_samples`` times on each neighbour and bounds epsilon from below.

  ``seed=None`` (the default) draws the seed from OS entropy, like every
  entry point of the library; it is recorded in the result (``seed``), and
  passing it back reproduces the audit. Keys are ``split(key(seed), 2
  num_samples)``: the first half for ``D``, the
  second for ``D'`` (host mechanisms: integer seeds from
  ``numpy.random.default_rng(seed)``). The runs are compiled once
  (``compile_seconds``; for the host mechanisms, one warm-up run) and then
  timed (``seconds``). The claim is read from the accountant of the first
  run on ``D'`` (a broken twin's accountant charges what the correct one
  does). The bound is :func:`dpjax.audit.bounds.empirical_epsilon` with
  ``holdout=True``: threshold, region and direction chosen on the first half
  of each side's runs, the Clopper-Pearson bound evaluated on the second.

  Examples:
    >>> from dpjax.audit import mechanisms
    >>> r = mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step"), num_samples=2000,
    ...                      seed=0)
    >>> round(r.claimed_epsilon, 4), r.consistent
    (1.1603, True)
  """
  return _run(setup, num_samples, seed, confidence, None)


def _audit_seed(seed: int | None) -> int:
  """``None``: a fresh seed from OS entropy; otherwise the checked explicit seed."""
  return secrets.randbits(_common.SEED_BITS) if seed is None else _common.check_seed(seed)


def _run(setup: AuditSetup, num_samples: int, seed: int | None, confidence: float,
         cache: dict | None) -> AuditResult:
  """:func:`run_audit`; ``cache`` maps a program key to its compiled runs (see :func:`audit`)."""
  num_samples = _validate.positive_int(num_samples, "num_samples")
  if num_samples < 4:
    raise ValueError(f"num_samples must be >= 4 (two halves of two runs), got {num_samples}.")
  seed = _audit_seed(seed)
  d0, d1 = setup.datasets
  with injected_noise(setup.noise_factor):
    if setup.host:
      seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, size=2 * num_samples)
      start = time.perf_counter()
      setup.sample(int(seeds[0]), d0)  # warm-up: compiles the mechanism's programs.
      compiled_at = time.perf_counter()
      s0 = np.asarray([setup.sample(int(k), d0)[0] for k in seeds[:num_samples]])
      out1 = [setup.sample(int(k), d1) for k in seeds[num_samples:]]
      s1 = np.asarray([o[0] for o in out1])
      claim = float(out1[0][1])
    else:
      keys = jax.random.split(_common.key_from_seed(seed), 2 * num_samples)
      chunk = min(num_samples, _CHUNK)
      start = time.perf_counter()
      program = (setup.name, "2x-sensitivity" if setup.twin is None else setup.twin, chunk)
      batched = None if cache is None else cache.get(program)
      if batched is None:
        batched = jax.jit(jax.vmap(setup.sample, in_axes=(0, None))).lower(
            keys[:chunk], d0).compile()
        if cache is not None:
          cache[program] = batched
        compiled_at = time.perf_counter()
      else:  # reused: nothing compiled.
        start = compiled_at = time.perf_counter()
      s0, _ = _batched_runs(batched, keys[:num_samples], d0, chunk)
      s1, acc = _batched_runs(batched, keys[num_samples:], d1, chunk)
      claim = float(accounting.epsilon_spent(acc, setup.delta, setup.method))
  lower = bounds.empirical_epsilon(s0, s1, setup.delta, confidence=confidence, holdout=True)
  done = time.perf_counter()
  return AuditResult(setup.name, setup.twin, setup.channel, claim, setup.delta, lower,
                     num_samples, compiled_at - start, done - compiled_at,
                     tuple(float(v) for v in s0[:8]), seed)


def _batched_runs(compiled, keys, data, chunk: int):
  """The statistics of ``len(keys)`` runs in calls of ``chunk`` (last padded), one accountant."""
  total = keys.shape[0]
  pad = -total % chunk
  if pad:
    keys = jnp.concatenate([keys, keys[:pad]])
  stats, acc = [], None
  for i in range(0, total + pad, chunk):
    s, a = compiled(keys[i:i + chunk], data)
    stats.append(np.asarray(s))
    if acc is None:
      acc = jax.tree.map(lambda v: v[0], a)
  return np.concatenate(stats)[:total].astype(np.float64), acc


def audit(name: str, *, num_samples: int, seed: int | None = None,
          twins: tuple[str, ...] | None = None, confidence: float = 0.95) -> list[AuditResult]:
  """The correct run of ``name`` and its broken ``twins`` (default: :data:`CONTROLS`), same keys.

  ``seed`` as in :func:`run_audit` (``None``: one fresh seed, shared by all the runs).

  The ``"2x-sensitivity"`` twin reuses the correct run's compiled program
  (a builder's ``doubled`` changes only the datasets), so its
  ``compile_seconds`` is 0.

  Raises:
    RuntimeError: from :func:`check_injection`.
  """
  twins = CONTROLS[name] if twins is None else tuple(twins)
  seed = _audit_seed(seed)
  cache: dict = {}
  results = [_run(make_setup(name), num_samples, seed, confidence, cache)]
  for twin in twins:
    r = _run(make_setup(name, twin=twin), num_samples, seed, confidence, cache)
    check_injection(results[0], r)
    results.append(r)
  return results


def check_injection(correct: AuditResult, twin: AuditResult) -> None:
  """Raises ``RuntimeError`` when a noise twin released what the correct run did, same keys.

  Then the injected factor never reached the mechanism's noise (it draws
  somewhere the hook does not see), and the twin
  would prove nothing. Other twins are not checked (they change the data
  or the program, not the noise).
  """
  if twin.twin in _FACTORS and twin.fingerprint == correct.fingerprint:
    raise RuntimeError(
        f"the {twin.twin!r} twin of {twin.name!r} released exactly what the correct run did "
        "under the same keys: the injected noise factor never reached the mechanism's noise.")
