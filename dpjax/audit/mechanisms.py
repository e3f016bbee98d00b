"""End-to-end privacy audits of dpjax's mechanisms, channel by channel, with broken twins.

Each entry of :data:`MECHANISMS` runs one shipped mechanism, unchanged, from
a fresh key on one of two neighbouring datasets ``D`` and ``D'`` and reduces
what it releases (the update and the transform state, which the caller sees
too) to a scalar statistic. :func:`run_audit` draws ``num_samples`` runs on
each side in one ``jit(vmap(...))`` and bounds epsilon from below with
:func:`dpjax.audit.bounds.empirical_epsilon` (Jagielski, Ullman & Oprea 2020,
"Auditing differentially private machine learning: how private is private
SGD?", NeurIPS; Nasr, Song, Thakurta, Papernot & Carlini 2021, "Adversary
instantiation: lower bounds for differentially private machine learning",
IEEE S&P), with exact Clopper & Pearson (1934) intervals. The threshold and
the region are chosen on one half of the runs and the bound is evaluated on
the other half (``holdout=True``), so the reported number is a valid 95%
lower bound for the one test that was chosen, not the maximum of many.

**Channels.** A mechanism that composes several releases (gradient,
curvature, trace, direction) is audited once per channel: the budget split
(a public option of the transform) gives that channel most of the budget,
the canary moves that channel by its full sensitivity, and the statistic is
the likelihood-ratio test of that channel. The claim is always the whole
run's: ``epsilon_spent`` of the mechanism's own accountant (``"gaussian"``,
exact for compositions of Gaussian mechanisms, Dong, Roth & Su 2019; the RDP
accountant's CKS conversion for Poisson DP-SGD; AOP states its (epsilon,
delta)). So a channel whose noise is missing, halved, or calibrated to half
its sensitivity shows a lower bound above the claim even though the other
channels are correct.

The channels audited (:data:`MECHANISMS`):

* ``dp_gd``: the gradient (1 and 4 steps; zero-out and replace-one);
* ``dp_newton``, for each of hessian/qu x clip/add x fixed/adaptive lambda:
  ``gradient`` (the noisy gradient), ``direction`` (the noisy direction,
  which is where the curvature enters: ``dp_newton`` never releases its
  curvature matrix on its own, so the curvature's channel is the direction
  release, whose canary moves ``H`` by its full ``L1 / n``) and, for the
  adaptive lambda, ``trace``;
* ``dp_precond_gd``: ``curvature`` (the released symmetric matrix) and
  ``end-to-end`` (the shipped defaults; zero-out and replace-one);
* ``dpjax.sklearn.DPLogisticRegression``: its coefficients, end to end;
* the tree's prefix sums, Poisson DP-SGD, online-to-batch and AOP.

**Canaries.** One coordinate, ``e_1``, is the canary's: no public row has a
component along it unless a channel needs one (stated per entry).

* Gradient channels: ``x = e_1, y = +1`` at a public start with margin -20
  (-50 for precond-gd), so its gradient is ``-e_1`` to 2e-9 relative: the
  full sensitivity ``L0 / n``.
* Curvature, direction and trace channels: the same row at margin 0, where
  its Hessian weight is the maximal 1/4: it moves the mean curvature by
  ``e_1 e_1^T / (4n)`` (operator and Frobenius norm ``L1 / n``), the trace
  by ``L1 / n`` and, through them, the Newton direction by its sensitivity.
  For ``modification="add"`` no other row spans ``e_1``. For ``"clip"`` a
  fresh direction would hide the canary (clip lifts every eigenvalue below
  lambda to lambda, and ``L1 / n < lambda``), so public rows along ``e_1``
  bring the curvature there to lambda, where the canary's ``L1 / n`` is not
  clipped away.

**Neighbouring relations** (``relation``). ``"zero-out"``: ``D`` holds the
null row (``x = 0``: zero gradient and curvature) where ``D'`` holds the
canary; ``n`` is public. ``"replace-one"``: one row of ``D`` is replaced by
another; the canary pairs are built to reach the replace-one sensitivities
(opposite gradients, orthogonal curvatures). The estimator is audited on a
label flip of one row (``y = -1`` on ``D``, ``+1`` on ``D'``, ``x = e_1``):
under it the mean gradient moves by exactly ``||x|| / n`` at every point
(``sigma(m) + sigma(-m) = 1``) and the curvature not at all, so every release
of the fit moves by at most its zero-out sensitivity and the zero-out proof
covers the pair.

**Broken twins** (:data:`TWINS`), each audited against the correct claim:

* ``"noise/2"``: every release adds half the noise while the accountant
  charges the original budget (:func:`dpjax.noise.broken_noise_for_audit`,
  read at trace time; AOP's objective perturbation, the one Gaussian draw
  that is not a release, gets the same factor there);
* ``"2x-sensitivity"``: the canary's contribution to every released sum is
  doubled. ``D'`` holds two canary rows where ``D`` holds two null rows
  (the tree: a leaf input of 2; the estimator: two labels flipped;
  replace-one entries: two rows replaced). A
  mechanism calibrated for one row but exposed to this pair releases exactly
  what a mechanism whose sensitivity constant is half the true one releases
  (the gradient, curvature and trace sums move by twice their bounds; the
  Newton direction by ``2 (lambda + L) / (lambda + 2L)`` times its bound):
  the bug of a mislabelled neighbouring relation (zero-out noise on
  replace-one neighbours) or of a dropped factor 2. A row of twice the norm
  bound would not do: the transforms that clip per example remove it, and
  for the others it changes the curvature by 4x and the gradient by 2x at
  once.

Replace-one entries also have ``"zero-out-noise"``: the transform's default
(zero-out) calibration on the replace-one pair, a mislabelled relation
(gradient noise for ``L0 / n`` where the pair moves the sum by ``2 L0 /
n``; the curvature's ``sqrt(2)``). Two mechanism-specific
controls remain: ``"fresh-tree-noise"`` (the tree adds fresh noise to every
node at every step instead of reusing the released values: the shipped tree
stores its releases and has no mode that redraws them, so the control
re-releases the stored nodes before each step, :func:`_redraw_released`)
and AOP's ``"noise/10"`` (see :func:`_aop`).

**Why the audits are evaluated at delta = 0.1** (:data:`AUDIT_DELTA`). Every
zCDP mechanism is (epsilon(delta), delta)-DP for every delta, so its claim
can be tested at any point of its curve. At delta = 1e-5 the test needs
regions of probability ~1e-5: even a likelihood-ratio statistic at 100,000
runs a side flags a factor-2 bug by only ~25% of the claim, and not at all
at 20,000. At delta = 0.1 the regions have probability ~0.1, and 4,000 runs
separate a correct mechanism (lower bound below its claim) from a twin with
twice the sensitivity (lower bound about twice the claim). AOP's claim is
an (epsilon, delta) pair only and is tested at its own delta.

A correct mechanism must give a lower bound ``<=`` its claim; a broken twin
must give one above it. :func:`audit` runs an entry and its twins and checks
that the injected bug really changed the runs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import secrets
import time
from typing import Any, Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax import baselines
from dpjax import glm
from dpjax import noise
from dpjax import online
from dpjax import tree_aggregation as ta
from dpjax import transforms
from dpjax.audit import bounds
from dpjax.transforms.dp_newton import direction_sensitivity, newton_budget

__all__ = ["AUDIT_DELTA", "AuditResult", "AuditSetup", "BROKEN", "CONTROLS", "MECHANISMS",
           "NUM_SAMPLES", "TEST_SAMPLES", "TEST_SAMPLES_DEFAULT", "TWINS", "audit",
           "check_injection", "injected_noise", "make_setup", "run_audit", "runs_on_host"]

NUM_SAMPLES = 100_000  # runs on each of D and D' in benchmarks/audit.py.
AUDIT_DELTA = 0.1  # the delta at which the zCDP/RDP claims are tested (module docstring).
TWINS = ("noise/2", "2x-sensitivity")
BROKEN = TWINS + ("zero-out-noise", "fresh-tree-noise", "noise/10")
RHO = 0.5  # total zCDP budget of the audited runs: mu = 1, epsilon(0.1) = 1.16.
CONTRACT_DELTA = 1e-5  # the delta of the (epsilon, delta) calibrations (dp-sgd, AOP).
_CHUNK = 25_000  # runs per compiled call (bounds the memory of a vmap).


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

  Through :func:`dpjax.noise.broken_noise_for_audit`, which every draw of the
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


# ----------------------------------------------------------------------------
# Datasets.
# ----------------------------------------------------------------------------


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


def _stack(rows: list[tuple[tuple[float, ...], float]], dtype=jnp.float32):
  x = jnp.asarray(np.asarray([r[0] for r in rows], np.float64), dtype)
  y = jnp.asarray(np.asarray([r[1] for r in rows], np.float64), dtype)
  return x, y


def _zero_out_pair(n: int, public: list, canary: tuple, *, doubled: bool, d: int):
  """``D``: the public rows, then null rows; ``D'``: one canary (two if ``doubled``) last."""
  k = 2 if doubled else 1
  if len(public) + k > n:
    raise ValueError(f"{len(public)} public rows and {k} canaries do not fit in n={n}.")
  null = ((0.0,) * d, 1.0)
  fill = [null] * (n - len(public) - k)
  return (_stack(public + fill + [null] * k), _stack(public + fill + [canary] * k))


def _balanced(count: int, x: tuple[float, ...]) -> list:
  """``count`` public rows ``x`` with labels alternating +1, -1."""
  return [(x, 1.0 if i % 2 == 0 else -1.0) for i in range(count)]


# ----------------------------------------------------------------------------
# Builders: DP-GD.
# ----------------------------------------------------------------------------

_MARGIN = 20.0  # the gradient canary's |margin|: sigma(-20) = 2e-9.



_GD_N = 10


def _gd_public(count: int) -> list:
  """Public rows along ``e_2`` (margin 0 at any ``w`` with ``w_2 = 0``), balanced labels."""
  return [((0.0, 0.5 + 0.2 * (i % 3)), 1.0 if i % 2 == 0 else -1.0) for i in range(count)]


def _label_flip_pair(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(x, y, y')``: ``n - k`` public rows and ``k`` canaries ``e_1`` whose label flips ``-1 -> +1``."""
  public = _gd_public(n - k)
  x = np.asarray([r[0] for r in public] + [(1.0, 0.0)] * k, np.float64)
  y = np.asarray([r[1] for r in public] + [-1.0] * k, np.float64)
  y_prime = y.copy()
  y_prime[n - k:] = 1.0
  return x, y, y_prime


def _opposite_gradient_rows():
  """A replace-one pair of rows with nearly opposite gradients at ``w = R e_2``.

  Row ``(cos a, -sin a)`` with ``y = +1`` has margin ``-R sin a = -100`` and
  gradient ``~ -x``; its replacement ``(cos a, sin a)`` with ``y = -1`` has
  margin ``-100`` too and gradient ``~ +x'``. The gradients differ by
  ``2 cos a ~ 2``: twice the zero-out sensitivity ``L0``, the replace-one
  worst case for a sum of gradients.
  """
  a = 0.01
  radius = 100.0 / math.sin(a)
  return (np.asarray([0.0, radius]), ((math.cos(a), -math.sin(a)), 1.0),
          ((math.cos(a), math.sin(a)), -1.0))


def _replace_one_pair(n: int, public: list, row: tuple, other: tuple, *, doubled: bool):
  """``D`` holds ``row`` (twice if ``doubled``), ``D'`` holds ``other`` in its place."""
  k = 2 if doubled else 1
  base = public[: n - k]
  if len(base) + k != n:
    raise ValueError(f"{len(public)} public rows do not fill n={n} with {k} swapped rows.")
  return _stack(base + [row] * k), _stack(base + [other] * k)


def _unit_difference(w0: jax.Array, datasets) -> jax.Array:
  g0, g1 = (np.asarray(glm.logistic_loss_and_grad(w0, *ds)[1], np.float64) for ds in datasets)
  return jnp.asarray((g1 - g0) / np.linalg.norm(g1 - g0), jnp.float32)


def _relation_options(transform: Callable, relation: str) -> dict:
  """The ``neighbouring=`` option of ``transform`` for ``relation`` (zero-out: every default)."""
  if relation == "zero-out":
    return {}
  import inspect  # pylint: disable=import-outside-toplevel
  if "neighbouring" not in inspect.signature(transform).parameters:
    raise ValueError(
        f"{transform.__name__} takes no neighbouring= option in this version, so "
        f"relation={relation!r} cannot be audited with its own calibration (only its "
        "'zero-out-noise' twin runs).")
  return {"neighbouring": relation}


def _dp_gd(*, steps: int, relation: str = "zero-out", doubled: bool = False,
           calibration: str | None = None) -> _Spec:
  """``dp_gd`` (``learning_rate=1``) from a public start, ``n = 10``, ``d = 2``.

  Zero-out: public rows along ``e_2`` (margin 0), the canary ``e_1`` at
  margin -20 vs the null row. Every step's mean gradient along ``e_1`` is
  the canary's ``-1/n`` (to 2e-9) or 0, so ``w_T[0] - w_0[0]`` (the sum of
  the released shifts) is the likelihood-ratio test of the ``T``-fold
  composition. Replace-one: the rows of :func:`_opposite_gradient_rows`
  (mean gradients ``2/n`` apart) and the statistic ``(w_T - w_0) . u``, ``u``
  the unit difference of the two mean gradients at ``w_0``.
  ``calibration`` (default: ``relation``) is the ``neighbouring=`` the
  transform is built with; ``"zero-out"`` on the replace-one pair is the
  ``"zero-out-noise"`` twin.
  """
  n, d = _GD_N, 2
  calibration = relation if calibration is None else calibration
  if relation == "zero-out":
    w0 = jnp.asarray([-_MARGIN, 0.0], jnp.float32)
    datasets = _zero_out_pair(n, _gd_public(n - 2), ((1.0, 0.0), 1.0), doubled=doubled, d=d)
    u = jnp.asarray([1.0, 0.0], jnp.float32)
    canary = "x = e_1, y = +1 at margin -20 (gradient -e_1) vs the null row"
    statistic = "w_T[0] - w_0[0]"
  elif relation == "replace-one":
    w, row, other = _opposite_gradient_rows()
    w0 = jnp.asarray(w, jnp.float32)
    datasets = _replace_one_pair(n, _gd_public(n), row, other, doubled=doubled)
    u = _unit_difference(w0, _replace_one_pair(n, _gd_public(n), row, other, doubled=False))
    canary = ("(cos a, -sin a), y = +1 replaced by (cos a, sin a), y = -1 at w_0 = R e_2, "
              "margins -100 (mean gradients 2 cos a / n apart)")
    statistic = "(w_T - w_0) . u, u the unit mean-gradient difference"
  else:
    raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
  options = _relation_options(transforms.dp_gd, calibration)

  def run(key, data):
    x, y = data
    tx = transforms.dp_gd(n=n, rho=RHO, steps=steps, learning_rate=1.0, key=key, **options)
    w, state = w0, tx.init(w0)
    for _ in range(steps):
      upd, state = tx.update(glm.logistic_loss_and_grad(w, x, y)[1], state, w)
      w = optax.apply_updates(w, upd)
    return (w - w0) @ u, state.accountant

  label = "" if calibration == "zero-out" else f", neighbouring={calibration!r}"
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               f"dp_gd(steps={steps}{label})", "gradient", relation, canary, statistic)


# ----------------------------------------------------------------------------
# Builders: the double-noise Newton method.
# ----------------------------------------------------------------------------

_NEWTON_N = 100
_NEWTON_LAMBDA = 0.1  # the fixed lambda: 40 L1/n at n = 100.
# (grad_frac, trace_frac) per audited channel: most of the budget on that channel.
_NEWTON_SPLIT = {"gradient": (0.9, 0.1), "direction": (0.05, 0.05), "trace": (0.05, 0.95)}
_NEWTON_SPLIT_CLIP_ADAPTIVE_DIRECTION = (0.05, 0.15)  # a steadier lambda for clip (below).
# c for clip's adaptive direction audit: lambda's fixed point sqrt(c / (n^2 rho_direction))
# is then ~20 L1/n, where clip's constant (L1/n) / (lam (lam - L1/n)) is within 10% of the
# largest shift a rank-one canary makes, (L1/n) / (lam (lam + L1/n)). Near the default c's
# lambda (~5 L1/n) that ratio is 0.67, and clip's bound is loose there.
_CLIP_ADAPTIVE_TRACE_COEFF = 8.0


def _newton_llr(u, state, *, n: int, rho_direction: float, modification: str, model):
  """Log-likelihood ratio ``D'`` vs ``D`` of one released Newton step in ``d = 1``.

  Released: the update ``u = -(P g~ + sigma_d z)`` with ``P = 1 / Psi_lam(H)``,
  and in the state lambda, the gradient noise std ``sigma_g`` and the
  direction noise std ``sigma_d = |g~| s(lam) / sqrt(2 rho_direction)``, which
  gives ``r = |g~|`` exactly (post-processing of the released ``g~``). With
  ``g~ = +-r`` the release has likelihood
  ``sum_(+-) phi((+-r - g_X) / sigma_g) phi((u +- P_X r) / sigma_d)`` under
  side ``X`` (mean gradient ``g_X``, curvature ``H_X``: the two candidate
  datasets' values, known to the auditor). The nominal stds are used (a
  broken twin's state reports the same ones). The trace's own likelihood is
  left out: the statistic is still a function of the release.
  """
  lam = state.min_eigenvalue
  unit = direction_sensitivity(lam, n=n, modification=modification) / math.sqrt(
      2.0 * rho_direction)
  sd = state.direction_noise_std
  r = sd / unit
  sg = state.grad_noise_std

  def loglik(g, h):
    psi = h + lam if modification == "add" else jnp.maximum(h, lam)
    p = 1.0 / psi
    return jnp.logaddexp(-0.5 * ((r - g) / sg) ** 2 - 0.5 * ((u + p * r) / sd) ** 2,
                         -0.5 * ((-r - g) / sg) ** 2 - 0.5 * ((u - p * r) / sd) ** 2)

  (g0, h0), (g1, h1) = model
  return loglik(g1, h1) - loglik(g0, h0)


def _newton(*, curvature: str, modification: str, lam: Any, channel: str,
            doubled: bool = False) -> _Spec:
  """One step of ``dp_newton`` in ``d = 1`` (``n = 100``), audited on one channel.

  * ``"gradient"``: the canary at margin -20 (``w_0 = -20``), null public
    rows; budget split ``grad_frac = 0.9``; statistic :func:`_newton_llr`.
  * ``"direction"``: the canary at margin 0 (``w_0 = 0``): it moves the
    curvature by ``L1 / n`` and the direction by its sensitivity; budget
    ``grad_frac = 0.05`` (``trace_frac = 0.05``; for clip with the adaptive
    lambda, which must land near the public curvature, ``trace_frac = 0.15``
    and ``trace_coeff = 8``, see ``_CLIP_ADAPTIVE_TRACE_COEFF``); statistic
    :func:`_newton_llr`. For clip, public rows along ``e_1`` (balanced
    labels, margin 0, zero net gradient) bring the curvature to lambda (the
    fixed one, or the adaptive lambda's fixed point ``sqrt(c / (n^2
    rho_direction))``), so the canary is not clipped away.
  * ``"trace"`` (adaptive only): the canary at margin 0 and 10 public rows
    along ``e_1`` (so the noisy trace stays positive and lambda above its
    floor: lambda is then strictly increasing in the released trace);
    budget ``trace_frac = 0.95``; statistic the released lambda
    (``state.min_eigenvalue``).
  """
  n = _NEWTON_N
  adaptive = isinstance(lam, str)
  if channel not in _NEWTON_SPLIT:
    raise ValueError(f"channel must be one of {sorted(_NEWTON_SPLIT)}, got {channel!r}.")
  if channel == "trace" and not adaptive:
    raise ValueError("the trace channel exists only with min_eigenvalue='adaptive'.")
  grad_frac, trace_frac = _NEWTON_SPLIT[channel]
  trace_coeff = 0.5  # the default c.
  if channel == "direction" and adaptive and modification == "clip":
    grad_frac, trace_frac = _NEWTON_SPLIT_CLIP_ADAPTIVE_DIRECTION
    trace_coeff = _CLIP_ADAPTIVE_TRACE_COEFF
  budget = newton_budget(RHO, grad_frac=grad_frac, trace_frac=trace_frac,
                                    adaptive=adaptive)
  public: list = []
  if channel == "gradient":
    w0 = -_MARGIN
  else:
    w0 = 0.0
    if channel == "trace":
      public = _balanced(10, (1.0,))
    elif modification == "clip":
      h = (float(lam) if not adaptive
           else math.sqrt(trace_coeff / (n * n * budget.rho_direction)))
      public = _balanced(max(1, round(4 * n * h)), (1.0,))
  canary_row = ((1.0,), 1.0)
  datasets = _zero_out_pair(n, public, canary_row, doubled=doubled, d=1)
  w0 = jnp.full((1,), w0, jnp.float32)
  model = []
  for x, y in _zero_out_pair(n, public, canary_row, doubled=False, d=1):
    c = glm.logistic_grad_and_curvature(w0, x, y, curvature)
    model.append((float(c.grad[0]), float(c.matrix[0, 0])))
  options = dict(curvature=curvature, modification=modification, min_eigenvalue=lam,
                 grad_frac=grad_frac, trace_frac=trace_frac, trace_coeff=trace_coeff)
  coeff_text = "" if trace_coeff == 0.5 else f", trace_coeff={trace_coeff:g}"

  def run(key, data):
    x, y = data
    tx = transforms.dp_newton(n=n, rho=RHO, steps=1, key=key, **options)
    state = tx.init(w0)
    g = glm.logistic_loss_and_grad(w0, x, y)[1]
    upd, state = tx.update(g, state, w0, x=x, y=y)
    if channel == "trace":
      stat = state.min_eigenvalue
    else:
      stat = _newton_llr(upd[0], state, n=n, rho_direction=budget.rho_direction,
                         modification=modification, model=model)
    return stat, state.accountant

  lam_text = "adaptive lambda" if adaptive else f"lambda = {float(lam):g}"
  margin = "-20" if channel == "gradient" else "0"
  canary = f"x = 1, y = +1 at margin {margin} vs the null row (d = 1, n = {n})"
  if public:
    canary += f"; {len(public)} public rows x = 1 (balanced labels)"
  statistic = ("released lambda (increasing in the noisy trace)" if channel == "trace"
               else "log-likelihood ratio of the update and the norm of g~ (from the released "
               "direction std)")
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               f"dp_newton(curvature={curvature!r}, modification={modification!r}, {lam_text}, "
               f"grad_frac={grad_frac}, trace_frac={trace_frac}{coeff_text})", channel, "zero-out",
               canary, statistic)


# ----------------------------------------------------------------------------
# Builders: precond-gd.
# ----------------------------------------------------------------------------

_PRECOND_N = 100
_PRECOND_STEPS = 3
_PRECOND_MARGIN = 50.0


def _precond(*, channel: str, relation: str = "zero-out", doubled: bool = False,
             calibration: str | None = None) -> _Spec:
  """``dp_precond_gd`` with the QU curvature ``X^T X / (4n)`` released at the public start.

  * ``"curvature"``: ``d = 2``, ``n = 100``, 20 public rows along ``e_2``;
    ``curvature_frac = 0.9``, one step. Zero-out: the canary ``e_1`` (QU
    weight 1/4: the matrix moves by ``e_1 e_1^T / (4n)``, Frobenius norm
    ``L1 / n``, all on the (1, 1) entry, whose noise std is ``sigma_H``);
    statistic the released ``H~_11``. Replace-one: ``e_1`` replaced by
    ``e_2`` (Frobenius change ``sqrt(2) L1 / n``, the replace-one worst
    case); statistic ``H~_11 - H~_22``.
  * ``"end-to-end"``: the shipped defaults (``curvature_frac = 0.03``,
    ``kappa = 3``, ``learning_rate = 1``), ``T = 3`` steps. Zero-out: ``d =
    1``, the canary at margin -50 (gradient ``-1/n`` at every step, QU
    curvature ``L1 / n``); replace-one: ``d = 2`` and the rows of
    :func:`_opposite_gradient_rows`. Statistic: the log-likelihood ratio of
    the whole release, ``sum_t g~_t . (g_D' - g_D) / sigma_g^2 + <H~, H_D' -
    H_D>_F / sigma_H^2`` (diagonal entries; ``g~_t = -P^{-1} u_t``, ``P`` the
    released preconditioner), which is the Neyman-Pearson test of the
    composition of the ``T + 1`` Gaussian mechanisms.
  ``calibration`` as in :func:`_dp_gd`.
  """
  n = _PRECOND_N
  calibration = relation if calibration is None else calibration
  options = _relation_options(transforms.dp_precond_gd, calibration)
  if channel == "curvature":
    d, steps, frac = 2, 1, 0.9
    public = _balanced(20, (0.0, 1.0))
    w0 = jnp.zeros((d,), jnp.float32)
    if relation == "zero-out":
      datasets = _zero_out_pair(n, public, ((1.0, 0.0), 1.0), doubled=doubled, d=d)
      canary = "x = e_1 (QU weight 1/4) vs the null row; 20 public rows x = e_2"
      weights = jnp.asarray([1.0, 0.0], jnp.float32)
    elif relation == "replace-one":
      public = public + [((0.0, 0.0), 1.0)] * (n - len(public))
      datasets = _replace_one_pair(n, public, ((1.0, 0.0), 1.0), ((0.0, 1.0), 1.0),
                                   doubled=doubled)
      canary = "x = e_1 replaced by x = e_2 (QU weights 1/4); 20 public rows x = e_2"
      weights = jnp.asarray([1.0, -1.0], jnp.float32)
    else:
      raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
    statistic = "released H~_11" if relation == "zero-out" else "released H~_11 - H~_22"

    def run(key, data):
      x, y = data
      tx = transforms.dp_precond_gd(n=n, rho=RHO, steps=steps, curvature_frac=frac, key=key,
                                    **options)
      state = tx.init(w0)
      c = glm.logistic_grad_and_curvature(w0, x, y, "qu")
      _, state = tx.update(c.grad, state, w0, curvature_matrix=c.matrix)
      return jnp.diagonal(state.released_curvature) @ weights, state.accountant

    mech = f"dp_precond_gd(steps=1, curvature_frac={frac}"
  elif channel == "end-to-end":
    steps = _PRECOND_STEPS
    if relation == "zero-out":
      w0 = jnp.full((1,), -_PRECOND_MARGIN, jnp.float32)
      pair = lambda doubled: _zero_out_pair(n, [], ((1.0,), 1.0), doubled=doubled, d=1)
      canary = "x = 1, y = +1 at margin -50 (gradient -1/n, QU curvature 1/(4n)) vs the null row"
    elif relation == "replace-one":
      w, row, other = _opposite_gradient_rows()
      w0 = jnp.asarray(w, jnp.float32)
      pair = lambda doubled: _replace_one_pair(n, _gd_public(n), row, other, doubled=doubled)
      canary = ("(cos a, -sin a), y = +1 replaced by (cos a, sin a), y = -1 at w_0 = R e_2 "
                "(opposite gradients)")
    else:
      raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
    datasets = pair(doubled)
    model = [glm.logistic_grad_and_curvature(w0, x, y, "qu") for x, y in pair(False)]
    dg = model[1].grad - model[0].grad
    dh = jnp.diagonal(model[1].matrix - model[0].matrix)
    statistic = "log-likelihood ratio of the gradient releases and the curvature release"

    def run(key, data):
      x, y = data
      tx = transforms.dp_precond_gd(n=n, rho=RHO, steps=steps, key=key, **options)
      w, state = w0, tx.init(w0)
      llr = 0.0
      for t in range(steps):
        c = glm.logistic_grad_and_curvature(w, x, y, "qu")
        upd, state = tx.update(c.grad, state, w, curvature_matrix=c.matrix if t == 0 else None)
        g_noisy = -jnp.linalg.solve(state.preconditioner, upd)  # learning_rate = 1.
        llr = llr + g_noisy @ dg / state.noise_std**2
        w = optax.apply_updates(w, upd)
      llr = llr + jnp.diagonal(state.released_curvature) @ dh / state.curvature_noise_std**2
      return llr, state.accountant

    mech = f"dp_precond_gd(steps={steps}, defaults"
  else:
    raise ValueError(f"channel must be 'curvature' or 'end-to-end', got {channel!r}.")
  label = "" if calibration == "zero-out" else f", neighbouring={calibration!r}"
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               mech + label + ")", channel, relation, canary, statistic)


# ----------------------------------------------------------------------------
# Builders: the scikit-learn estimator (host).
# ----------------------------------------------------------------------------

_ESTIMATOR_N = 50


def _estimator(*, doubled: bool = False) -> _Spec:
  """``dpjax.sklearn.DPLogisticRegression`` (``algorithm="auto"``), one fit per run, host.

  ``n = 50``, two features: public rows along ``e_2`` with balanced labels,
  and the canary row ``x = e_1`` with label ``-1`` on ``D`` and ``+1`` on
  ``D'`` (two such rows for the 2x twin). The public inputs are given:
  ``classes=[-1, 1]``, ``data_norm=1`` (rows as given),
  ``fit_intercept=False`` (with an intercept no row of ``X`` is the null
  row), the default ``neighbouring="zero-out"``; ``epsilon`` = the Gaussian epsilon of
  ``rho = 0.5`` at ``delta = 1e-5``. The label flip moves the mean gradient
  by exactly ``e_1 / n`` at every iterate and the curvature not at all (module
  docstring), so each step of the fit sees the full gradient sensitivity.
  Statistic: ``coef_[0, 0]``. Claim: the fit's ``rho_`` at the audit delta.
  """
  from dpjax import sklearn as dp_sklearn  # pylint: disable=import-outside-toplevel
  n = _ESTIMATOR_N
  x, y, y_prime = _label_flip_pair(n, 2 if doubled else 1)
  epsilon = accounting.zcdp_to_epsilon(RHO, CONTRACT_DELTA, "gaussian")
  # The audit's fits compose (each is one more release of the same rows): charge them to
  # an accountant of their own, without a limit, rather than to the process default.
  accountant = dp_sklearn.BudgetAccountant()

  def run(seed, data):
    features, labels = data
    clf = dp_sklearn.DPLogisticRegression(epsilon=epsilon, delta=CONTRACT_DELTA, data_norm=1.0,
                                          classes=[-1.0, 1.0], fit_intercept=False,
                                          accountant=accountant, random_state=int(seed))
    clf.fit(features, labels)
    claim = accounting.zcdp_to_epsilon(clf.rho_, AUDIT_DELTA, "gaussian")
    return float(clf.coef_[0, 0]), claim

  return _Spec(run, ((x, y), (x, y_prime)), None, None, AUDIT_DELTA, True,
               f"DPLogisticRegression(epsilon={epsilon:.4g}, delta=1e-5, data_norm=1, "
               "classes=[-1, 1], fit_intercept=False)", "end-to-end", "zero-out (label flip)",
               "x = e_1 with y = -1 (D) or +1 (D'); 48 public rows along e_2", "coef_[0, 0]")


# ----------------------------------------------------------------------------
# Builders: tree aggregation, Poisson DP-SGD, online-to-batch, AOP.
# ----------------------------------------------------------------------------


# The tree (and online-to-batch through it) releases its nodes through dpjax.noise;
# audit() checks that the noise twin's injection reaches them.


def _redraw_released(tree: ta.TreeState, key: jax.Array) -> ta.TreeState:
  """The ``"fresh-tree-noise"`` bug: every stored node released again, with new noise.

  Each level's released value becomes ``add_gaussian(exact sum, std = its nominal
  std)`` under a fresh key, so the next prefix sum adds fresh noise on every node
  of ``I_t`` instead of reusing the released values (fresh noise per step is
  not private at the tree's scale). Levels never released (variance 0) stay
  exact zeros.
  """
  levels = tree.variance.shape[0]
  keys = jax.random.split(key, levels)

  def one(h):
    return jax.tree.map(
        lambda e: noise.add_gaussian(keys[h], e[h], sensitivity=1.0,
                                     noise_std=jnp.sqrt(tree.variance[h])), tree.exact)

  rows = [one(h) for h in range(levels)]
  released = jax.tree.map(lambda *r: jnp.stack(r), *rows)
  return tree._replace(released=released)


def _tree(*, steps: int, statistic: str, fresh_noise: bool = False,
          doubled: bool = False) -> _Spec:
  """Tree-aggregation prefix sums (``tree_prefix_sum``) of a 1-D stream, in one ``lax.scan``.

  Leaf 1 is the canary's input (1, the sensitivity; 2 for the 2x twin) on
  ``D'`` and 0 on ``D``; the other leaves are public zeros. Two statistics,
  both linear in the released prefix sums ``ghat_t``:

  * ``"nodes"``: ``sum_h ghat_{2^h}``. The prefix sums at ``t = 2^h`` are
    exactly the ``L`` nodes that contain leaf 1, each shifted by 1 with its
    own noise, and no other release carries information on the shift: the
    likelihood-ratio test of the correct tree, whose audit is tight;
  * ``"all-steps"``: ``sum_t ghat_t / |I_t|``: the likelihood-ratio test
    against fresh per-step noise (then the ``ghat_t`` are independent with
    variance ``|I_t| sigma^2``), for the ``"fresh-tree-noise"`` control.
  """
  if statistic == "nodes":
    weights = [1.0 if t & (t - 1) == 0 else 0.0 for t in range(1, steps + 1)]
  elif statistic == "all-steps":
    weights = [1.0 / len(ta.prefix_nodes(t)) for t in range(1, steps + 1)]
  else:
    raise ValueError(f"statistic must be 'nodes' or 'all-steps', got {statistic!r}.")
  weights = jnp.asarray(weights, jnp.float32)

  def run(key, leaf1):
    tx = ta.tree_prefix_sum(steps=steps, rho=RHO, sensitivity=1.0, key=key)

    def body(carry, t):
      state, stat = carry
      if fresh_noise:  # The bug: new node noise at every step.
        state = state._replace(tree=_redraw_released(
            state.tree, jax.random.fold_in(jax.random.fold_in(key, 7), t)))
      leaf = jnp.where(t == 1, leaf1, 0.0) * jnp.ones((1,))
      ghat, state = tx.update(leaf, state)
      return (state, stat + weights[t - 1] * ghat[0]), None

    carry = (tx.init(jnp.zeros((1,), jnp.float32)), jnp.zeros((), jnp.float32))
    (state, stat), _ = jax.lax.scan(body, carry, jnp.arange(1, steps + 1))
    return stat, state.accountant

  value = 2.0 if doubled else 1.0
  text = ("sum of the prefix sums at t = 2^h (the nodes over leaf 1)" if statistic == "nodes"
          else "sum_t ghat_t / |I_t| (the test against fresh per-step noise)")
  bug = ", stored nodes re-released before every step" if fresh_noise else ""
  return _Spec(run, (jnp.float32(0.0), jnp.float32(value)), "gaussian", None, AUDIT_DELTA,
               False, f"tree_prefix_sum(steps={steps}{bug})",
               "prefix sums", "zero-out", "leaf 1 input 1 (the sensitivity) vs 0", text)


def _dp_sgd(*, steps: int, sampling_rate: float, doubled: bool = False) -> _Spec:
  """Poisson-subsampled DP-SGD (``dp_sgd``), calibrated by the RDP accountant.

  ``n = 64`` (the default batch cap's overflow slack, charged to delta, stays
  far below delta at ``q = 1/2``); ``epsilon`` is the Gaussian epsilon of
  ``rho = 0.5`` at ``delta = 1e-5``, the claim the RDP accountant's CKS
  conversion at the audit delta. Public rows along ``e_2``, the canary
  ``e_1`` at margin -20 (gradient norm 1 = ``clip_norm``); the 2x twin holds
  two canaries (each sampled independently: up to twice the clipped
  contribution). Statistic ``w_T[0] - w_0[0]``.
  """
  n, d = 64, 2
  epsilon = accounting.zcdp_to_epsilon(RHO, CONTRACT_DELTA, "gaussian")
  datasets = _zero_out_pair(n, _gd_public(n - 2), ((1.0, 0.0), 1.0), doubled=doubled, d=d)
  w0 = jnp.asarray([-_MARGIN, 0.0], jnp.float32)

  def run(key, data):
    tx = transforms.dp_sgd(n=n, sampling_rate=sampling_rate, epsilon=epsilon,
                           delta=CONTRACT_DELTA, steps=steps, clip_norm=1.0, learning_rate=1.0,
                           key=key)
    w, state = w0, tx.init(w0)
    for _ in range(steps):
      upd, state = tx.update(None, state, w, data=data)
      w = optax.apply_updates(w, upd)
    return w[0] - w0[0], optax.tree.get(state, "accountant")

  return _Spec(run, datasets, "cks", None, AUDIT_DELTA, False,
               f"dp_sgd(sampling_rate={sampling_rate}, steps={steps}, epsilon={epsilon:.4g}, "
               "delta=1e-5)", "gradient", "zero-out",
               "x = e_1, y = +1 at margin -20 vs the null row", "w_T[0] - w_0[0]")


def _online_to_batch(*, steps: int, doubled: bool = False) -> _Spec:
  """DP online-to-batch (``online_to_batch`` around OGD), two examples per step.

  The first batch holds the canary (``x = e_1``, ``y = +1``) and a null row
  on ``D'`` (two canaries for the 2x twin), two null rows on ``D``; the rest
  of the stream is null rows. The clip ``C_0 = 1/2`` equals the canary's
  gradient norm at the first play 0, so one canary moves the first leaf by
  the full sensitivity. Statistic: the output's first coordinate.
  """
  value = jnp.asarray([1.0, 1.0 if doubled else 0.0], jnp.float32)

  def run(key, first):
    learner = online.ogd(radius=1e3, learning_rate=1.0)
    tx = transforms.online_to_batch(learner, batch_size=2, steps=steps, rho=RHO, k=1.0,
                                    clip_norm=0.5, loss="logistic", key=key)
    w = jnp.zeros((2,), jnp.float32)
    state = tx.init(w)
    for t in range(steps):
      scale = first if t == 0 else jnp.zeros((2,), jnp.float32)
      batch = (scale[:, None] * jnp.asarray([[1.0, 0.0]]), jnp.ones((2,)))
      upd, state = tx.update(None, state, w, batch=batch)
      w = optax.apply_updates(w, upd)
    return w[0], state.accountant

  return _Spec(run, (jnp.zeros((2,), jnp.float32), value), "gaussian", None, AUDIT_DELTA,
               False, f"online_to_batch(ogd, batch_size=2, steps={steps})",
               "gradient (tree)", "zero-out", "x = e_1, y = +1 in the first batch vs a null row",
               "output[0]")


def _aop(*, epsilon: float, gamma: float, doubled: bool = False) -> _Spec:
  """AOP (``baselines.aop``, host float64): replace-one neighbours, the last row's label flipped.

  The last row is ``(e_1, -1)`` on ``D`` and ``(e_1, +1)`` on ``D'``: the
  mean gradient moves by ``1/n`` at every point, half the ``2 L / n`` that
  AOP's analysis budgets. A small public ``gamma`` (the minimiser's gradient
  tolerance) shrinks the output noise, so the statistic sees the objective
  perturbation. AOP is tested at its own delta (1e-5): its claim is that
  (epsilon, delta) pair.

  Its only noise twin is ``"noise/10"``: AOP's calibration budgets twice the
  gradient change that any logistic pair at its operating point makes, uses
  the classical ``(1 + sqrt(2 ln(1/delta))) / epsilon`` Gaussian bound
  (about 2.5 times the exact noise at epsilon = 1.8), and spends part of
  epsilon on the Jacobian and output terms; with half or a third of the noise
  it is still (epsilon, 1e-5)-DP here, so no audit could flag those twins.
  """
  n = 10
  x, y, y_prime = _label_flip_pair(n, 2 if doubled else 1)

  def run(seed, data):
    features, labels = data
    theta, _ = baselines.aop(features, labels, epsilon=epsilon, delta=CONTRACT_DELTA,
                             key=int(seed), gamma=gamma)
    return float(theta[0]), float(epsilon)

  # b is drawn by noise.perturbation_vector (jax.random.normal: not a release), the
  # output perturbation is released through noise.add_gaussian: the twin scales both.
  return _Spec(run, ((x, y), (x, y_prime)), None, epsilon, CONTRACT_DELTA, True,
               f"baselines.aop(epsilon={epsilon}, delta=1e-5, gamma={gamma})", "end-to-end",
               "replace-one (label flip)", "x = e_1 with y = -1 (D) or +1 (D')", "theta[0]")


# ----------------------------------------------------------------------------
# The registry.
# ----------------------------------------------------------------------------


def _newton_entries() -> dict:
  out = {}
  for curvature, ctag in (("hessian", "hess"), ("qu", "qu")):
    for modification in ("clip", "add"):
      for lam, ltag in ((_NEWTON_LAMBDA, "fixed"), ("adaptive", "adaptive")):
        channels = ("gradient", "direction") + (("trace",) if ltag == "adaptive" else ())
        for channel in channels:
          out[f"newton-{ctag}-{modification}-{ltag}-{channel}"] = (
              _newton, dict(curvature=curvature, modification=modification, lam=lam,
                            channel=channel), TWINS)
  return out


# name -> (builder, keyword arguments, the twins it must flag).
MECHANISMS: dict[str, tuple[Callable[..., _Spec], dict, tuple[str, ...]]] = {
    "dp-gd-1-step": (_dp_gd, dict(steps=1), TWINS),
    "dp-gd-4-steps": (_dp_gd, dict(steps=4), TWINS),
    "dp-gd-replace-one": (_dp_gd, dict(steps=1, relation="replace-one"),
                          TWINS + ("zero-out-noise",)),
    **_newton_entries(),
    "precond-gd-curvature": (_precond, dict(channel="curvature"), TWINS),
    "precond-gd-end-to-end": (_precond, dict(channel="end-to-end"), TWINS),
    "precond-gd-replace-one-curvature": (
        _precond, dict(channel="curvature", relation="replace-one"), TWINS + ("zero-out-noise",)),
    "precond-gd-replace-one-end-to-end": (
        _precond, dict(channel="end-to-end", relation="replace-one"), TWINS + ("zero-out-noise",)),
    "estimator": (_estimator, {}, TWINS),
    "tree-prefix-sums": (_tree, dict(steps=255, statistic="nodes"), TWINS),
    "tree-prefix-sums-all-steps": (_tree, dict(steps=255, statistic="all-steps"),
                                   ("fresh-tree-noise",)),
    "dp-sgd-poisson": (_dp_sgd, dict(steps=1, sampling_rate=0.5), TWINS),
    "online-to-batch": (_online_to_batch, dict(steps=4), TWINS),
    "aop": (_aop, dict(epsilon=2.0, gamma=1e-6), ("noise/10",)),
}

# The runs per neighbour of the default test suite (tests/audit), at which every twin
# is flagged with margin (benchmarks/audit.py --quick uses them too).
TEST_SAMPLES_DEFAULT = 4000
TEST_SAMPLES: dict[str, int] = {
    "dp-sgd-poisson": 8000,  # a mixture over the Poisson sample: weaker statistic.
    "estimator": 1000,  # one host fit per run.
    "aop": 3000,  # one host minimisation and exact release per run.
}


def runs_on_host(name: str) -> bool:
  """Whether the entry runs eagerly on the host, one call per run (AOP, the estimator)."""
  if name not in MECHANISMS:
    raise ValueError(f"unknown mechanism {name!r}; pick one of {sorted(MECHANISMS)}.")
  return MECHANISMS[name][0] in (_estimator, _aop)


# The twins each mechanism is checked with.
CONTROLS: dict[str, tuple[str, ...]] = {name: entry[2] for name, entry in MECHANISMS.items()}

_FACTORS = {"noise/2": 0.5, "noise/10": 0.1}


def make_setup(name: str, *, twin: str | None = None, **overrides: Any) -> AuditSetup:
  """The :class:`AuditSetup` of an entry of :data:`MECHANISMS`, correct or a broken ``twin``.

  Args:
    name: a key of :data:`MECHANISMS`.
    twin: None, or one of the entry's twins (:data:`CONTROLS`): ``"noise/2"``,
      ``"2x-sensitivity"``, ``"zero-out-noise"`` (replace-one entries: the
      default zero-out calibration on the replace-one pair), ``"fresh-tree-noise"``
      or ``"noise/10"``.
    **overrides: replace the builder's keyword arguments (e.g. ``steps=8``).

  Raises:
    ValueError: an unknown name or twin, or a twin the entry is not checked
      with.
  """
  if name not in MECHANISMS:
    raise ValueError(f"unknown mechanism {name!r}; pick one of {sorted(MECHANISMS)}.")
  builder, kwargs, twins = MECHANISMS[name]
  if twin is not None and twin not in BROKEN:
    raise ValueError(f"twin must be None or one of {BROKEN}, got {twin!r}.")
  if twin is not None and twin not in twins:
    raise ValueError(f"twin {twin!r} is not a control of {name!r}; its twins are {twins}.")
  kwargs = {**kwargs, **overrides}
  if twin == "2x-sensitivity":
    kwargs["doubled"] = True
  elif twin == "fresh-tree-noise":
    kwargs["fresh_noise"] = True
  elif twin == "zero-out-noise":
    kwargs["calibration"] = "zero-out"
  spec = builder(**kwargs)
  return AuditSetup(
      name=name, twin=twin, mechanism=spec.mechanism, channel=spec.channel,
      relation=spec.relation, canary=spec.canary, statistic=spec.statistic, sample=spec.run,
      datasets=spec.datasets, method=spec.method, delta=spec.delta, host=spec.host,
      noise_factor=_FACTORS.get(twin))


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
