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
  charges the original budget (:func:`dpjax.mechanisms.noise.broken_noise_for_audit`,
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

# The entry point users import: everything below is defined in the modules named and
# re-exported here under its old path, private names included.
# pylint: disable=unused-import
from dpjax.audit.core import (AUDIT_DELTA, BROKEN, CONTRACT_DELTA, NUM_SAMPLES, RHO, TWINS,
                              AuditResult, AuditSetup, _Spec, injected_noise)
from dpjax.audit.datasets import (_MARGIN, _balanced, _gd_public, _label_flip_pair,
                                  _opposite_gradient_rows, _relation_options,
                                  _replace_one_pair, _stack, _unit_difference, _zero_out_pair)
from dpjax.audit.full_batch import (_CLIP_ADAPTIVE_TRACE_COEFF, _GD_N, _NEWTON_LAMBDA,
                                    _NEWTON_N, _NEWTON_SPLIT,
                                    _NEWTON_SPLIT_CLIP_ADAPTIVE_DIRECTION, _PRECOND_MARGIN,
                                    _PRECOND_N, _PRECOND_STEPS, _dp_gd, _newton, _newton_llr,
                                    _precond)
from dpjax.audit.host import _ESTIMATOR_N, _aop, _estimator
from dpjax.audit.registry import (_FACTORS, CONTROLS, MECHANISMS, TEST_SAMPLES,
                                  TEST_SAMPLES_DEFAULT, _newton_entries, make_setup,
                                  runs_on_host)
from dpjax.audit.runner import (_CHUNK, _audit_seed, _batched_runs, _run, audit,
                                check_injection, run_audit)
from dpjax.audit.streams import _dp_sgd, _online_to_batch, _redraw_released, _tree

__all__ = ["AUDIT_DELTA", "AuditResult", "AuditSetup", "BROKEN", "CONTROLS", "MECHANISMS",
           "NUM_SAMPLES", "TEST_SAMPLES", "TEST_SAMPLES_DEFAULT", "TWINS", "audit",
           "check_injection", "injected_noise", "make_setup", "run_audit", "runs_on_host"]
