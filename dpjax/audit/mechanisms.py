"""End-to-end privacy audits of dpjax's mechanisms, with deliberately broken controls.

Each :class:`AuditSetup` runs one shipped mechanism, unchanged, from a fresh
key on one of two neighbouring datasets ``D`` and ``D'`` and reduces the
release to a scalar statistic. The neighbours follow the mechanism's own
relation (``README``, "Privacy contract"): add/remove with ``n`` public is
realised as "zero-out" (``D`` holds an all-zero row whose gradient and
curvature are exactly 0, ``D'`` holds the canary in its place); AOP's
replace-one neighbours swap that row too; the tree sees one leaf's input
changed by its sensitivity. The canary is a worst case for the gradient
channel: ``x = e_1, y = +1`` at the public start ``w_0 = -20 e_1``, a margin
of -20, so its logistic gradient is ``-e_1`` to 2e-9 (the full sensitivity)
while its Hessian weight ``sigma'(20) ~ 2e-9`` leaves the curvature
unchanged. The other rows lie along ``e_2`` (margin 0 at ``w_0``), so the
canary's coordinate sees only the canary and the noise. The statistic is the
projection of the released parameters on ``e_1`` (for the tree, an
inverse-variance weighted sum of the released prefix sums).

The claimed epsilon is read from the mechanism's own accountant after a run
(``epsilon_spent``; the exact ``"gaussian"`` conversion for the zCDP
mechanisms, as :func:`dpjax.fit` reports, and the RDP accountant's CKS
conversion for Poisson DP-SGD; AOP states its (epsilon, delta)).
:func:`run_audit` draws ``num_samples`` runs on each side in one
``jit(vmap(...))`` and applies :func:`dpjax.audit.bounds.empirical_epsilon`.

Negative controls (``broken=``) show that the audit has power:

* ``"noise/3"`` (``"noise/10"`` for AOP, :data:`CONTROLS`): every Gaussian draw (``jax.random.normal``) made while the
  mechanism runs is scaled by 1/3 (:func:`scaled_noise`), while its
  accountant still charges the original budget: the classic "noise at the
  wrong scale" bug, injected into the shipped code path itself;
* ``"fresh-tree-noise"`` (tree only): the tree redraws its node noises at
  every step instead of reusing them (``spec-online-to-batch.md`` pitfall P7),
  by re-keying a ``"regenerate"`` tree before each step.

A correct mechanism must give a lower bound ``<=`` its claim; a broken one
must give a lower bound above it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import accounting
from dpjax import baselines
from dpjax import glm
from dpjax import online
from dpjax import tree_aggregation as ta
from dpjax import transforms
from dpjax.audit import bounds

__all__ = ["AuditResult", "AuditSetup", "BROKEN", "CONTROLS", "MECHANISMS", "NUM_SAMPLES", "make_setup",
           "run_audit", "scaled_noise"]

NUM_SAMPLES = 20_000  # runs on each of D and D' (the issue's minimum).
BROKEN = ("noise/3", "noise/10", "fresh-tree-noise")
DELTA = 1e-5
MARGIN = 20.0  # |canary margin| at w_0: sigma(-20) ~ 2e-9.


class AuditSetup(NamedTuple):
  """One mechanism on one pair of neighbours, ready for :func:`run_audit`."""

  name: str
  sample: Callable[[jax.Array, jax.Array], jax.Array]  # (key, neighbour bool) -> statistic.
  claimed_epsilon: float  # what the mechanism's accountant (or its contract) reports.
  delta: float
  broken: str | None  # None, or the injected bug (BROKEN).
  host: bool  # True: ``sample`` runs eagerly per key (AOP), not under jit/vmap.
  noise_scale: float | None  # the "noise/3" bug: scaled_noise(1/3) around all the runs.


class AuditResult(NamedTuple):
  """An audit's outcome: the claim, the lower bound and whether they are consistent."""

  name: str
  broken: str | None
  claimed_epsilon: float
  delta: float
  lower_bound: bounds.EpsilonLowerBound
  num_samples: int
  seconds: float

  @property
  def consistent(self) -> bool:
    """The lower bound does not exceed the claim (what a correct mechanism must show)."""
    return self.lower_bound.epsilon <= self.claimed_epsilon


@contextlib.contextmanager
def scaled_noise(factor: float) -> Iterator[None]:
  """Scales every ``jax.random.normal`` draw by ``factor`` (a test-only bug injection).

  Active while code is traced or run eagerly inside the block; compiled
  caches are cleared on entry and exit so that nothing traced inside leaks
  out (or in). Not thread-safe; for negative controls only.

  Examples:
    >>> import jax
    >>> from dpjax.audit import mechanisms
    >>> with mechanisms.scaled_noise(0.0):
    ...   float(jax.random.normal(jax.random.key(0), ()))
    0.0
  """
  original = jax.random.normal

  @functools.wraps(original)
  def scaled(*args, **kwargs):
    return original(*args, **kwargs) * factor

  jax.clear_caches()
  jax.random.normal = scaled
  try:
    yield
  finally:
    jax.random.normal = original
    jax.clear_caches()


def _data(n: int, neighbour: jax.Array, dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
  """``n - 1`` public rows along ``e_2`` (balanced labels), then the zero row or the canary."""
  i = np.arange(n - 1)
  base = np.stack([np.zeros(n - 1), 0.5 + 0.4 * (i % 3) / 2], axis=1)
  x = jnp.concatenate([jnp.asarray(base, dtype),
                       jnp.where(neighbour, 1.0, 0.0).astype(dtype) * jnp.eye(2, dtype=dtype)[:1]])
  y = jnp.asarray(np.concatenate([np.where(i % 2 == 0, 1.0, -1.0), [1.0]]), dtype)
  return x, y


def _w0() -> jax.Array:
  return jnp.asarray([-MARGIN, 0.0], jnp.float32)


def _claim(sample_state: Callable[[jax.Array], Any], method: str) -> float:
  """Runs the mechanism once on ``D'`` and reads the epsilon its accountant reports."""
  state = jax.jit(sample_state)(jax.random.key(0))
  acc = optax.tree.get(state, "accountant") if not isinstance(
      state, accounting.AccountantState) else state
  return float(accounting.epsilon_spent(acc, DELTA, method))


def _full_batch(name: str, *, steps: int, epsilon: float, options: dict) -> tuple:
  """DP-GD (``dp_gd``) or the double-noise Newton (``dp_newton``) from ``w_0``."""
  n = 10
  rho = accounting.epsilon_to_zcdp(epsilon, DELTA, "gaussian")

  def run(key, neighbour):
    x, y = _data(n, neighbour)
    if name == "dp-gd":
      tx = transforms.dp_gd(n=n, rho=rho, steps=steps, learning_rate=1.0, key=key)
    else:
      tx = transforms.dp_newton(n=n, rho=rho, steps=steps, key=key, **options)
    w = _w0()
    state = tx.init(w)
    for _ in range(steps):
      g = glm.logistic_loss_and_grad(w, x, y)[1]
      extra = {} if name == "dp-gd" else {"x": x, "y": y}
      u, state = tx.update(g, state, w, **extra)
      w = optax.apply_updates(w, u)
    return w[0] - _w0()[0], state

  return run, "gaussian"


def _dp_sgd(*, steps: int, epsilon: float, sampling_rate: float) -> tuple:
  """Poisson-subsampled DP-SGD (``dp_sgd``), calibrated by the RDP accountant.

  ``n = 64`` so that the default batch cap's overflow slack (charged to
  delta) stays far below delta at ``q = 1/2``.
  """
  n = 64

  def run(key, neighbour):
    x, y = _data(n, neighbour)
    tx = transforms.dp_sgd(n=n, sampling_rate=sampling_rate, epsilon=epsilon, delta=DELTA,
                           steps=steps, clip_norm=1.0, learning_rate=1.0, key=key)
    w = _w0()
    state = tx.init(w)
    for _ in range(steps):
      u, state = tx.update(None, state, w, data=(x, y))
      w = optax.apply_updates(w, u)
    return w[0] - _w0()[0], state

  return run, "cks"


def _tree(*, steps: int, epsilon: float, statistic: str, fresh_noise: bool) -> tuple:
  """Tree-aggregation prefix sums (``tree_prefix_sum``) of a 1-D stream, in one ``lax.scan``.

  Leaf 1 is the canary's input (1, the sensitivity) on ``D'`` and 0 on ``D``;
  the other leaves are public zeros. Two statistics, both linear in the
  released prefix sums ``ghat_t``:

  * ``"nodes"``: ``sum_h ghat_{2^h}``. The prefix sums at ``t = 2^h`` are
    exactly the ``L`` nodes that contain leaf 1, each shifted by 1 with its
    own noise, and no other release carries information on the shift: the
    likelihood-ratio test of the correct tree, whose audit is tight;
  * ``"all-steps"``: ``sum_t ghat_t / |I_t|``: the likelihood-ratio test
    against fresh per-step noise (then the ``ghat_t`` are independent with
    variance ``|I_t| sigma^2``), for the ``"fresh-tree-noise"`` control.
  """
  rho_total = accounting.epsilon_to_zcdp(epsilon, DELTA, "gaussian")
  if statistic == "nodes":
    weights = [1.0 if t & (t - 1) == 0 else 0.0 for t in range(1, steps + 1)]
  elif statistic == "all-steps":
    weights = [1.0 / len(ta.prefix_nodes(t)) for t in range(1, steps + 1)]
  else:
    raise ValueError(f"statistic must be 'nodes' or 'all-steps', got {statistic!r}.")
  weights = jnp.asarray(weights, jnp.float32)

  def run(key, neighbour):
    tx = ta.tree_prefix_sum(steps=steps, rho=rho_total, sensitivity=1.0, key=key,
                            mode="regenerate" if fresh_noise else "buffered")

    def body(carry, t):
      state, stat = carry
      if fresh_noise:  # The bug: new node noise at every step (pitfall P7).
        state = state._replace(tree=state.tree._replace(key=jax.random.fold_in(key, t)))
      leaf = jnp.where(jnp.logical_and(neighbour, t == 1), 1.0, 0.0) * jnp.ones((1,))
      ghat, state = tx.update(leaf, state)
      return (state, stat + weights[t - 1] * ghat[0]), None

    carry = (tx.init(jnp.zeros((1,), jnp.float32)), jnp.zeros((), jnp.float32))
    (state, stat), _ = jax.lax.scan(body, carry, jnp.arange(1, steps + 1))
    return stat, state

  return run, "gaussian"


def _online_to_batch(*, steps: int, epsilon: float) -> tuple:
  """DP online-to-batch (``online_to_batch`` around OGD), one example per step.

  The canary (``x = e_1``, ``y = +1``) is the first example on ``D'`` and a
  zero row on ``D``; the rest of the stream is public zero rows. The clip
  ``C_0 = 1/2`` equals the canary's gradient norm at the first play 0.
  """
  rho_total = accounting.epsilon_to_zcdp(epsilon, DELTA, "gaussian")

  def run(key, neighbour):
    learner = online.ogd(radius=1e3, learning_rate=1.0)
    tx = transforms.online_to_batch(learner, batch_size=1, steps=steps, rho=rho_total, k=1.0,
                                    clip_norm=0.5, loss="logistic", key=key)
    w = jnp.zeros((2,), jnp.float32)
    state = tx.init(w)
    for t in range(steps):
      first = jnp.logical_and(neighbour, t == 0)
      batch = (jnp.where(first, 1.0, 0.0) * jnp.asarray([[1.0, 0.0]]), jnp.ones((1,)))
      u, state = tx.update(None, state, w, batch=batch)
      w = optax.apply_updates(w, u)
    return w[0], state

  return run, "gaussian"


def _aop(*, epsilon: float, gamma: float) -> tuple:
  """AOP (``baselines.aop``, host float64): replace-one neighbours, the last row swapped.

  The last row is ``(e_1, -1)`` on ``D`` and ``(e_1, +1)`` on ``D'``: the
  largest change of the mean gradient that a replacement can make for the
  logistic loss, ``(sigma(a) + sigma(-a)) / n = 1 / n`` at every point (half
  the ``2 L / n`` that AOP's general analysis budgets). A small public
  ``gamma`` (the minimiser's gradient tolerance) shrinks the output noise, so
  the statistic sees the objective perturbation.
  """
  n = 10
  pair = []
  for label in (-1.0, 1.0):
    x, y = (np.asarray(a, np.float64) for a in _data(n, jnp.asarray(True)))
    y[-1] = label
    pair.append((x, y))

  def run(key, neighbour):
    x, y = pair[bool(neighbour)]
    theta, _ = baselines.aop(x, y, epsilon=epsilon, delta=DELTA, key=key, gamma=gamma)
    return theta[0]

  return run, None


# name -> (builder, keyword arguments). Claimed epsilons of 2 (1 for AOP's
# looser analysis is not needed: its claim is its own).
MECHANISMS: dict[str, tuple[Callable[..., tuple], dict]] = {
    "dp-gd-1-step": (_full_batch, dict(name="dp-gd", steps=1, epsilon=2.0, options={})),
    "dp-gd-4-steps": (_full_batch, dict(name="dp-gd", steps=4, epsilon=2.0, options={})),
    "newton-clip-fixed": (_full_batch, dict(name="newton", steps=1, epsilon=2.0, options=dict(
        modification="clip", min_eigenvalue=0.1))),
    "newton-add-fixed": (_full_batch, dict(name="newton", steps=1, epsilon=2.0, options=dict(
        modification="add", min_eigenvalue=0.1))),
    "newton-clip-adaptive": (_full_batch, dict(name="newton", steps=1, epsilon=2.0, options=dict(
        modification="clip"))),
    "newton-add-adaptive": (_full_batch, dict(name="newton", steps=1, epsilon=2.0, options=dict(
        modification="add"))),
    "tree-prefix-sums": (_tree, dict(steps=255, epsilon=2.0, statistic="nodes")),
    "tree-prefix-sums-all-steps": (_tree, dict(steps=255, epsilon=2.0, statistic="all-steps")),
    "dp-sgd-poisson": (_dp_sgd, dict(steps=1, epsilon=2.0, sampling_rate=0.5)),
    "online-to-batch": (_online_to_batch, dict(steps=4, epsilon=2.0)),
    "aop": (_aop, dict(epsilon=2.0, gamma=1e-6)),
}


# The negative control of each mechanism. AOP's is noise/10: its analysis
# budgets a gradient change of 2 L / n and spends part of epsilon on the
# Jacobian and output terms, while no logistic replacement moves the gradient
# by more than L / n, so with a third of the noise it is still about
# (1.8, 1e-5)-DP here: not a violation any audit could find.
CONTROLS: dict[str, str] = {name: "noise/3" for name in MECHANISMS}
CONTROLS.update({"tree-prefix-sums-all-steps": "fresh-tree-noise", "aop": "noise/10"})


_CLAIMS: dict[tuple, float] = {}


def make_setup(mechanism: str, *, broken: str | None = None, **overrides: Any) -> AuditSetup:
  """The :class:`AuditSetup` of a mechanism of :data:`MECHANISMS`, correct or ``broken``.

  Args:
    mechanism: a key of :data:`MECHANISMS`.
    broken: None, ``"noise/3"`` or ``"noise/10"`` (any mechanism), or
      ``"fresh-tree-noise"`` (the tree only); :data:`CONTROLS` lists the
      control each mechanism is checked with.
    **overrides: replace the builder's keyword arguments (e.g. ``steps=8``).
  """
  if mechanism not in MECHANISMS:
    raise ValueError(f"unknown mechanism {mechanism!r}; pick one of {sorted(MECHANISMS)}.")
  if broken is not None and broken not in BROKEN:
    raise ValueError(f"broken must be None or one of {BROKEN}, got {broken!r}.")
  builder, kwargs = MECHANISMS[mechanism]
  kwargs = {**kwargs, **overrides}
  if broken == "fresh-tree-noise":
    if builder is not _tree:
      raise ValueError("broken='fresh-tree-noise' applies to 'tree-prefix-sums' only.")
    kwargs["fresh_noise"] = True
  elif builder is _tree:
    kwargs.setdefault("fresh_noise", False)
  run, method = builder(**kwargs)
  factor = {"noise/3": 1.0 / 3.0, "noise/10": 0.1}.get(broken)
  if method is None:  # AOP: an (epsilon, delta) contract, host only.
    return AuditSetup(mechanism, run, float(kwargs["epsilon"]), DELTA, broken, True, factor)
  # The claim is the correct accountant's (a broken run's accountant reports the
  # same: the bug does not touch the accounting); computed once per configuration.
  cache_key = (mechanism, repr(sorted((k, v) for k, v in kwargs.items() if k != "fresh_noise")))
  if cache_key not in _CLAIMS:
    _CLAIMS[cache_key] = _claim(lambda key: run(key, jnp.asarray(True))[1], method)
  claim = _CLAIMS[cache_key]
  return AuditSetup(mechanism, lambda key, neighbour: run(key, neighbour)[0], claim, DELTA,
                    broken, False, factor)


def run_audit(setup: AuditSetup, *, num_samples: int = NUM_SAMPLES, seed: int = 0,
              confidence: float = 0.95) -> AuditResult:
  """Runs ``setup`` ``num_samples`` times on each neighbour and bounds epsilon from below.

  Keys are ``split(key(seed), 2 num_samples)``: the first half for ``D``, the
  second for ``D'``. Compilation time is included in ``seconds``.

  Examples:
    >>> from dpjax.audit import mechanisms
    >>> setup = mechanisms.make_setup("dp-gd-1-step")
    >>> r = mechanisms.run_audit(setup, num_samples=2000)
    >>> round(r.claimed_epsilon, 6), r.consistent
    (2.0, True)
  """
  import time  # pylint: disable=import-outside-toplevel
  if not isinstance(num_samples, int) or num_samples < 2:
    raise ValueError(f"num_samples must be an int >= 2, got {num_samples!r}.")
  start = time.perf_counter()
  with (scaled_noise(setup.noise_scale) if setup.noise_scale is not None
        else contextlib.nullcontext()):
    s0, s1 = _statistics(setup, num_samples, seed)
  lower = bounds.empirical_epsilon(s0, s1, setup.delta, confidence=confidence)
  return AuditResult(setup.name, setup.broken, setup.claimed_epsilon, setup.delta, lower,
                     num_samples, time.perf_counter() - start)


def _statistics(setup: AuditSetup, num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """The statistic of ``num_samples`` runs on ``D`` and on ``D'``."""
  if setup.host:  # One eager call per run; integer seeds avoid indexing a key array.
    seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, size=2 * num_samples)
    stats = np.asarray([setup.sample(int(k), i >= num_samples) for i, k in enumerate(seeds)])
    s0, s1 = stats[:num_samples], stats[num_samples:]
  else:
    keys = jax.random.split(jax.random.key(seed), 2 * num_samples)
    batched = jax.jit(jax.vmap(setup.sample, in_axes=(0, None)))
    s0 = np.asarray(batched(keys[:num_samples], jnp.asarray(False)))
    s1 = np.asarray(batched(keys[num_samples:], jnp.asarray(True)))
  return s0, s1
