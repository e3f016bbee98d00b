"""The audit's types and constants, and the noise injection of the broken twins.

:class:`AuditSetup` (one entry, ready to run) and :class:`AuditResult` (its
outcome), the builders' return type ``_Spec``, the budget and deltas of the
audited runs (:mod:`dpjax.audit.mechanisms` explains the choice of
``AUDIT_DELTA``), and :func:`injected_noise`, the ``"noise/2"`` twin's hook.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple

import jax

from dpjax.mechanisms import noise
from dpjax.audit import bounds

__all__ = ["AUDIT_DELTA", "AuditResult", "AuditSetup", "BROKEN", "NUM_SAMPLES", "TWINS",
           "injected_noise"]


NUM_SAMPLES = 100_000  # runs on each of D and D' in benchmarks/audit.py.
AUDIT_DELTA = 0.1  # the delta at which the zCDP/RDP claims are tested (module docstring).
TWINS = ("noise/2", "2x-sensitivity")
BROKEN = TWINS + ("zero-out-noise", "fresh-tree-noise", "noise/10")
RHO = 0.5  # total zCDP budget of the audited runs: mu = 1, epsilon(0.1) = 1.16.
CONTRACT_DELTA = 1e-5  # the delta of the (epsilon, delta) calibrations (dp-sgd, AOP).


class AuditSetup(NamedTuple):
  """One mechanism, channel and pair of neighbours (or a twin), ready for :func:`run_audit`."""

  name: str  # the key of MECHANISMS.
  twin: str | None  # None, or the injected bug (BROKEN).
  mechanism: str  # the shipped function audited, with its options.
  channel: str  # the release the statistic tests.
  relation: str  # "zero-out" or "replace-one" (module docstring).
  canary: str  # how D and D' differ.
  statistic: str  # what is computed from each run's release.
  sample: Callable[[Any, Any], tuple]  # (key, dataset) -> (statistic, accountant or claim).
  datasets: tuple[Any, Any]  # (D, D'): pytrees of arrays (host: anything `sample` takes).
  method: str | None  # the accountant's conversion for the claim; None: host-stated claim.
  delta: float
  host: bool  # True: `sample` runs eagerly per integer seed (AOP, the estimator).
  noise_factor: float | None  # the "noise/2" (or "noise/10") twin's factor.


class AuditResult(NamedTuple):
  """An audit's outcome: the claim, the held-out lower bound and whether they are consistent."""

  name: str
  twin: str | None
  channel: str
  claimed_epsilon: float
  delta: float
  lower_bound: bounds.EpsilonLowerBound
  num_samples: int  # runs on each side (half choose the test, half evaluate it).
  compile_seconds: float  # tracing and compilation (or the host warm-up), not in `seconds`.
  seconds: float  # the 2 num_samples runs and the bound.
  fingerprint: tuple[float, ...]  # the first statistics on D: shows an injected bug acted.
  seed: int  # the seed of the runs' keys (drawn from OS entropy when none was given).

  @property
  def consistent(self) -> bool:
    """The lower bound does not exceed the claim (what a correct mechanism must show)."""
    return self.lower_bound.epsilon <= self.claimed_epsilon

  @property
  def passed(self) -> bool:
    """Correct runs are consistent; broken twins are flagged (inconsistent)."""
    return self.consistent if self.twin is None else not self.consistent


# ----------------------------------------------------------------------------
# Bug injection.
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def injected_noise(factor: float | None) -> Iterator[None]:
  """Every noise draw traced inside is ``factor`` times its size (``None``: nothing injected).

  Through :func:`dpjax.mechanisms.noise.broken_noise_for_audit`, which every draw of the
  library goes through (the releases and AOP's objective perturbation); the
  accountant still charges the original budget. Compiled caches are cleared
  on entry and exit: the injection is read at trace time, and a cached
  program would skip it.
  """
  if factor is None:
    yield
    return
  with contextlib.ExitStack() as stack:
    jax.clear_caches()
    stack.callback(jax.clear_caches)
    stack.enter_context(noise.broken_noise_for_audit(factor))
    yield


class _Spec(NamedTuple):
  """What a builder returns (see :func:`make_setup`).

  A builder's ``doubled`` (the 2x twin) changes ``datasets`` only, never the
  program ``run``: :func:`audit` reuses the compiled correct run for it.
  """

  run: Callable[[Any, Any], tuple[jax.Array, Any]]  # (key, dataset) -> (statistic, state).
  datasets: tuple[Any, Any]  # (D, D') for the requested pair (correct or doubled).
  method: str | None  # the accountant's conversion; None: `claim` is a stated contract.
  claim: float | None
  delta: float
  host: bool
  mechanism: str
  channel: str
  relation: str
  canary: str
  statistic: str
